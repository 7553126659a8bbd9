"""GraphError -> hipDNN status: one table, by origin.

``hipdnn_iree/plugin_sdk/errors.py`` holds the table; every ``except GraphError`` that reports a
status goes through its ``to_hipdnn`` (checked here by reading the source with ``ast``), and the
two origins give their statuses through the public API: the caller's graph (``"graph"``) and a
stored plan's payload (``"plan"``).
"""
import ast
import os

import pytest

import hipdnn_iree as hd
from graph_ir.desc import GraphError
from harness import REPO, raises
from hipdnn_iree.plugin_sdk.errors import ORIGINS, STATUS_BY_ORIGIN, status_for, to_hipdnn

S = hd.Status
F = hd.DataType.FLOAT


# -- (a) the table ---------------------------------------------------------------------------
def test_the_table():
    assert STATUS_BY_ORIGIN == {
        "graph": {"invalid": S.BAD_PARAM, "unsupported": S.NOT_SUPPORTED, "internal": S.INTERNAL_ERROR},
        "plan": {"invalid": S.PLUGIN_ERROR, "unsupported": S.NOT_SUPPORTED, "internal": S.INTERNAL_ERROR},
    }
    assert ORIGINS == tuple(STATUS_BY_ORIGIN)
    for origin in ORIGINS:
        assert tuple(STATUS_BY_ORIGIN[origin]) == GraphError.KINDS   # every kind has a status


@pytest.mark.parametrize("origin", ORIGINS)
@pytest.mark.parametrize("kind", GraphError.KINDS)
def test_to_hipdnn_keeps_the_message(origin, kind):
    err = GraphError("tensor 'X' (uid 3): dims must be positive", kind)
    e = to_hipdnn(err, origin, "from_hipdnn_graph: ")
    assert isinstance(e, hd.HipdnnError)
    assert e.status == STATUS_BY_ORIGIN[origin][kind] == status_for(err, origin)
    assert e.message == "from_hipdnn_graph: tensor 'X' (uid 3): dims must be positive"
    assert to_hipdnn(err, origin).message == str(err)


def test_an_unknown_origin_is_a_programming_error():
    with pytest.raises(ValueError, match="origin"):
        to_hipdnn(GraphError("x"), "caller")


# -- (b) no other place builds a status from a GraphError --------------------------------------
TABLE = os.path.join("hipdnn_iree", "plugin_sdk", "errors.py")
# No folder is exempt: frontend/ops/ routes its GraphErrors through to_hipdnn too.
EXEMPT_FOLDERS = ()


def _names_graph_error(t) -> bool:
    if isinstance(t, ast.Tuple):
        return any(_names_graph_error(x) for x in t.elts)
    return (isinstance(t, ast.Name) and t.id == "GraphError") or \
        (isinstance(t, ast.Attribute) and t.attr == "GraphError")


def status_builders(source: str, path: str = "<src>") -> list[str]:
    """``path:line: why`` for each ``except GraphError`` handler (alone or in a tuple) whose body
    constructs ``HipdnnError(...)`` or reads the caught error's ``kind``."""
    found = []
    for h in ast.walk(ast.parse(source, path)):
        if not (isinstance(h, ast.ExceptHandler) and h.type is not None and _names_graph_error(h.type)):
            continue
        for stmt in h.body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call):
                    f = node.func
                    if (isinstance(f, ast.Name) and f.id == "HipdnnError") or \
                            (isinstance(f, ast.Attribute) and f.attr == "HipdnnError"):
                        found.append(f"{path}:{node.lineno}: HipdnnError(...) in an except GraphError handler")
                elif (isinstance(node, ast.Attribute) and node.attr == "kind" and h.name
                      and isinstance(node.value, ast.Name) and node.value.id == h.name):
                    found.append(f"{path}:{node.lineno}: {h.name}.kind read in an except GraphError handler")
    return found


def test_the_scan_finds_what_it_looks_for():
    bad = (
        "try:\n    f()\nexcept GraphError as e:\n    raise HipdnnError(Status.BAD_PARAM, str(e))\n"
        "try:\n    f()\nexcept (desc.GraphError, KeyError) as e:\n    raise status.HipdnnError(s, 'x')\n"
        "try:\n    f()\nexcept GraphError as e:\n    s = S.A if e.kind == 'unsupported' else S.B\n")
    assert [x.split(": ", 1)[0] for x in status_builders(bad)] == ["<src>:4", "<src>:8", "<src>:12"]
    good = (
        "try:\n    f()\nexcept GraphError as e:\n    raise to_hipdnn(e, 'graph', 'x: ') from None\n"
        "try:\n    f()\nexcept GraphError:\n    return []\n"
        "try:\n    f()\nexcept KeyError as e:\n    raise HipdnnError(Status.BAD_PARAM, str(e))\n")
    assert status_builders(good) == []


def test_only_the_table_builds_a_status_from_a_graph_error():
    found = []
    for folder, _, files in os.walk(os.path.join(REPO, "hipdnn_iree")):
        for f in files:
            rel = os.path.relpath(os.path.join(folder, f), REPO)
            if not f.endswith(".py") or rel == TABLE or rel.startswith(EXEMPT_FOLDERS):
                continue
            with open(os.path.join(REPO, rel), encoding="utf-8") as fh:
                found += status_builders(fh.read(), rel)
    assert not found, "route these through hipdnn_iree/plugin_sdk/errors.py's to_hipdnn:\n" + "\n".join(found)


# -- (c) each origin through the public API ----------------------------------------------------
def _matmul_graph() -> bytes:
    g = hd.Graph(name="serialized_matmul", io_data_type=F, compute_data_type=F)
    a = g.tensor(name="A", uid=0, dim=[4, 8])
    b = g.tensor(name="B", uid=1, dim=[8, 5])
    g.matmul(a, b).set_output(True).set_uid(2).set_name("C")
    return g.to_hipdnn_graph()


def _with_newer_node_type(graph: bytes) -> bytes:
    """``graph`` with its first node's NodeAttributes union tag set to one this schema lacks (a node
    type from a newer hipDNN): a valid graph this project cannot handle."""
    from graph_ir._fbs import graph_generated as G
    node = G.Graph.GetRootAs(graph, 0).Nodes(0)
    at = node._tab.Pos + node._tab.Offset(8)     # NOTE: Node.attributes_type, the union's tag (uint8)
    data = bytearray(graph)
    data[at] = 200
    return bytes(data)


def _kind1_plan(graph: bytes, uids=(0, 1, 2)) -> bytes:
    """A stored plan whose payload is FUSPLAN kind 1 holding ``graph`` (as tests/test_hipdnn_graph_payload.py)."""
    from test_hipdnn_graph_payload import _fusilli_plan
    return _fusilli_plan(graph, uids)


@pytest.fixture(scope="module")
def nocache():
    return hd.create_handle(cache=False)


def test_invalid_graph_bytes_are_bad_param_from_the_caller_and_plugin_error_from_a_plan(nocache):
    truncated = _matmul_graph()[:60]
    with pytest.raises(GraphError) as raw:
        from graph_ir.desc import decode_graph
        decode_graph(truncated)
    assert raw.value.kind == "invalid"
    e = raises(S.BAD_PARAM, hd.Graph.from_hipdnn_graph, truncated, match="from_hipdnn_graph: ")
    assert e.message == f"from_hipdnn_graph: {raw.value}"
    e = raises(S.PLUGIN_ERROR, hd.Graph.from_compiled_plan, nocache, _kind1_plan(truncated),
               match="the graph it holds cannot be read")
    assert e.message.endswith(f": {raw.value}")


def test_a_newer_node_type_is_not_supported_from_either_origin(nocache):
    newer = _with_newer_node_type(_matmul_graph())
    raises(S.NOT_SUPPORTED, hd.Graph.from_hipdnn_graph, newer, match="NodeAttributes type 200")
    raises(S.NOT_SUPPORTED, hd.Graph.from_compiled_plan, nocache, _kind1_plan(newer),
           match="NodeAttributes type 200")
    # NOTE: describing the plan (`hipdnn-iree inspect`) says the same (it said PLUGIN_ERROR before the table)
    from hipdnn_iree.backend.plan_info import read_plan
    raises(S.NOT_SUPPORTED, read_plan, _kind1_plan(newer), match="NodeAttributes type 200")


def test_a_lowering_defect_is_internal_error_from_either_origin(nocache, monkeypatch):
    import lowering._lower as _lower

    def defect(*args, **kwargs):
        raise GraphError("emitted MLIR does not parse: (a planted defect)", "internal")

    monkeypatch.setattr(_lower, "lower_graph", defect)
    g = hd.Graph.from_hipdnn_graph(_matmul_graph())
    raises(S.INTERNAL_ERROR, g.get_mlir, match="IREE_LINALG cannot lower the graph: emitted MLIR does not parse")
    # NOTE: a kind-1 plan is lowered when restored (it said PLUGIN_ERROR before the table)
    raises(S.INTERNAL_ERROR, hd.Graph.from_compiled_plan, nocache, _kind1_plan(_matmul_graph()),
           match="emitted MLIR does not parse")
