"""The package's layers, as folders, with imports running one way.

Every import statement of the project's modules (function-level ones included) is read with
``ast``; the test fails on an import cycle among the modules, or on an import from a lower layer
into a higher one.
"""
import ast
import os

from harness import REPO

# Layer of each top-level part, top first: a module may import its own layer or any lower one
# (higher number); within a layer the modules must still form no cycle.
LAYERS = {
    "hipdnn_iree": 0,                  # the public surface (__init__ re-exports)
    "hipdnn_iree.cli": 0,              # the command line: a user of the public API
    "hipdnn_iree.cudnn": 0,            # cuDNN FE's Python API: a user of the public API
    "hipdnn_iree.frontend": 1,
    "hipdnn_iree.backend": 2,
    "hipdnn_iree.plugins": 3,
    "hipdnn_iree.plugin_sdk": 4,
    "hipdnn_iree.flatbuffers_sdk": 5,
    "lowering": 6,                     # the MLIR emitters
    "graph_ir": 7,                     # the shared graph IR: descriptors, codec, layouts, shapes
}
PACKAGES = ("hipdnn_iree", "lowering", "graph_ir")
# Layers that work on graphs without emitting MLIR: they reach the IR through graph_ir only.
NO_EMITTERS = ("hipdnn_iree", "hipdnn_iree.cli", "hipdnn_iree.cudnn", "hipdnn_iree.frontend",
               "hipdnn_iree.backend", "hipdnn_iree.plugin_sdk", "hipdnn_iree.flatbuffers_sdk")


def _modules() -> dict[str, str]:
    """module name -> file path, for every .py under the project's packages."""
    found = {}
    for pkg in PACKAGES:
        for folder, _, files in os.walk(os.path.join(REPO, pkg)):
            if "__pycache__" in folder:
                continue
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, f), REPO)[:-3].split(os.sep)
                    if rel[-1] == "__init__":
                        rel = rel[:-1]
                    found[".".join(rel)] = os.path.join(folder, f)
    return found


def _layer(module: str) -> tuple[str, int]:
    best = max((k for k in LAYERS if module == k or module.startswith(k + ".")), key=len)
    return best, LAYERS[best]


def _imports(module: str, path: str, modules: dict) -> set[str]:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_pkg = path.endswith("__init__.py")
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts[:len(parts) - node.level + (1 if is_pkg else 0)]
                base = ".".join(parts + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for n in names:
            while n and n not in modules:
                n = n.rpartition(".")[0]
            if n and n != module:
                out.add(n)
    return out


def _graph():
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def test_every_module_belongs_to_a_layer_folder():
    flat = [m for m in _graph() if m.count(".") == 1 and m.startswith("hipdnn_iree.")
            and _layer(m)[0] == "hipdnn_iree"]
    assert not flat, f"modules outside the layer folders: {flat} (put each in frontend/, backend/, plugins/, ...)"


def test_no_upward_imports():
    bad = []
    for m, deps in _graph().items():
        _, mine = _layer(m)
        for d in deps:
            _, theirs = _layer(d)
            if theirs < mine:
                bad.append(f"{m} (layer {mine}) imports {d} (layer {theirs})")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def test_frontends_and_cli_import_no_mlir_emitter():
    """hd.Graph, the facade, the CLI, the backend and the SDK import nothing of ``lowering``."""
    bad = sorted(f"{m} imports {d}" for m, deps in _graph().items() if _layer(m)[0] in NO_EMITTERS
                 for d in deps if _layer(d)[0] == "lowering")
    assert not bad, "imports of the MLIR emitters:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph = _graph()
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_each_layer_package_says_what_it_owns():
    for pkg in LAYERS:
        path = os.path.join(REPO, *pkg.split("."), "__init__.py")
        doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read()))
        assert doc and len(doc.split()) >= 25, f"{pkg}/__init__.py needs a docstring: what it owns, what it may import"
