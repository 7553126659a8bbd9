"""Dead code stays out: no condition made constant by a literal operand, and
the helpers nothing called are gone (grep and vulture found no caller)."""
import ast
import importlib
import os

import pytest

from harness import REPO

_PACKAGES = ("hipdnn_iree", "lowering", "graph_ir")


def _sources():
    for pkg in _PACKAGES:
        for root, _, files in os.walk(os.path.join(REPO, pkg)):
            for f in files:
                if f.endswith(".py") and not f.endswith("_generated.py"):
                    yield os.path.join(root, f)


def test_no_condition_is_made_constant_by_a_literal():
    """``x and False`` is always false, ``x or True`` always true: the rest of the condition is dead."""
    found = []
    for path in _sources():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        tests = [n.test for n in ast.walk(tree) if isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert))]
        tests += [c for n in ast.walk(tree) if isinstance(n, ast.comprehension) for c in n.ifs]
        for test in tests:
            for node in ast.walk(test):
                if isinstance(node, ast.BoolOp):
                    absorbing = isinstance(node.op, ast.Or)   # `x and False` is False, `x or True` is True
                    if any(isinstance(v, ast.Constant) and v.value is absorbing for v in node.values):
                        found.append(f"{os.path.relpath(path, REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module,owner,name", [
    ("hipdnn_iree.plugin_sdk.status", None, "fail"),
    ("hipdnn_iree.plugin_sdk.buffers", "BoundTensor", "describe"),
    ("graph_ir.layout", "Layout", "is_identity"),
    ("graph_ir.desc", None, "SCHEMA_NAMESPACE"),
    ("hipdnn_iree.plugins.iree_linalg.fusplan", None, "HEADER_SIZE"),
    ("hipdnn_iree.plugins.iree_linalg.plugin", "IreeLinalgPlugin", "describe_execution_context"),
], ids=lambda v: v or "-")
def test_unused_helpers_are_gone(module, owner, name):
    obj = importlib.import_module(module)
    if owner:
        obj = getattr(obj, owner)
    assert not hasattr(obj, name), f"{module}.{owner + '.' if owner else ''}{name} has no caller: remove it"
