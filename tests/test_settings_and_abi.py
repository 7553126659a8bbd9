"""No environment read at import (settings are read when a handle or its session is
made, or at call time where there is no handle), and the module ABI version checked on restore."""
import dataclasses
import os

import pytest

import hipdnn_iree as hd
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
from lowering.abi import ABI_FORMAT_VERSION, SUPPORTED_ABI_VERSIONS
from harness import raises, run_python

S = hd.Status
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
PLAN = os.path.join(DATA, "plan_v1_fusplan11_cpu.plan")


def test_import_reads_no_setting_and_a_handle_made_after_obeys_them():
    """Garbage in the variables: the import succeeds; a handle made then refuses the bad limit by
    name; a handle made with good values obeys them (plan limit, view cache)."""
    code = f"""
import os, sys
os.environ["HIPDNN_IREE_MAX_PLAN_BYTES"] = "not-a-number"
os.environ["HIPDNN_IREE_VIEW_CACHE"] = "garbage"
import hipdnn_iree as hd
from hipdnn_iree.plugins.iree_linalg import run, session, cache, compile, payload, describe  # noqa: F401
from hipdnn_iree.backend import envelope, planfile, plan_info  # noqa: F401
try:
    hd.create_handle()
except hd.HipdnnError as e:
    print("BAD_LIMIT", e.status.name, "HIPDNN_IREE_MAX_PLAN_BYTES" in str(e))
data = open({PLAN!r}, "rb").read()
os.environ["HIPDNN_IREE_MAX_PLAN_BYTES"] = str(len(data) - 1)
os.environ["HIPDNN_IREE_VIEW_CACHE"] = "0"
small = hd.create_handle()
os.environ["HIPDNN_IREE_MAX_PLAN_BYTES"] = str(len(data))
try:
    hd.Graph.from_compiled_plan(small, data)
except hd.HipdnnError as e:
    print("OVER_LIMIT", e.status.name, "limit" in str(e))
g = hd.Graph.from_compiled_plan(hd.create_handle(), data)    # made with the limit = the plan's size
print("VIEWS", g.get_execution_plan().context.reuse_views)
os.environ.pop("HIPDNN_IREE_VIEW_CACHE")
print("VIEWS_DEFAULT", hd.Graph.from_compiled_plan(hd.create_handle(), data).get_execution_plan().context.reuse_views)
"""
    p = run_python(code)
    assert p.returncode == 0, p.stderr
    out = p.stdout.split("\n")
    assert "BAD_LIMIT BAD_PARAM True" in out
    assert "OVER_LIMIT BAD_PARAM True" in out
    assert "VIEWS False" in out and "VIEWS_DEFAULT True" in out


def test_no_module_level_environment_reads():
    """Every ``os.environ`` read of the package sits inside a function."""
    import ast
    from harness import REPO
    found = []
    for pkg in ("hipdnn_iree", "lowering", "graph_ir"):
        for folder, _, files in os.walk(os.path.join(REPO, pkg)):
            for f in files:
                if not f.endswith(".py"):
                    continue
                path = os.path.join(folder, f)
                tree = ast.parse(open(path, encoding="utf-8").read())
                for node in tree.body:   # module-level statements only (not def/class bodies)
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        continue
                    for sub in ast.walk(node):
                        if isinstance(sub, ast.Attribute) and sub.attr in ("environ", "getenv"):
                            found.append(f"{os.path.relpath(path, REPO)}:{sub.lineno}")
    assert not found, found


def _with_abi_version(data: bytes, version: bytes) -> bytes:
    """``data`` with its module's ``hipdnn_iree.abi`` version rewritten in place (same length), the
    FUSPLAN digest refilled: a plan a release with another ABI version would write."""
    env = _envelope.decode(data)
    fp = _fusplan.unpack(env.plugin_payload)
    body = bytes(fp.body)
    old = b'{"version":%d,' % ABI_FORMAT_VERSION
    assert body.count(old) == 1
    body = body.replace(old, b'{"version":' + version + b',')
    payload = _fusplan.pack(body, fp.payload_kind, fp.metadata, None,
                            _fusplan.envelope_fields(env.engine_id, env.workspace_size, env.tensor_uids))
    return _envelope.encode(dataclasses.replace(env, plugin_payload=payload))


def test_a_plan_of_another_abi_version_is_a_version_mismatch_naming_both():
    data = open(PLAN, "rb").read()
    h = hd.create_handle()
    assert hd.Graph.from_compiled_plan(h, _with_abi_version(data, b"%d" % ABI_FORMAT_VERSION)) is not None
    e = raises(S.VERSION_MISMATCH, lambda: hd.Graph.from_compiled_plan(h, _with_abi_version(data, b"7")))
    msg = str(e)
    assert "version 7" in msg and ", ".join(map(str, SUPPORTED_ABI_VERSIONS)) in msg and "hipdnn_iree.abi" in msg
    # inspect reads the same ABI: the same refusal
    from hipdnn_iree.backend.plan_info import read_plan
    raises(S.VERSION_MISMATCH, lambda: read_plan(_with_abi_version(data, b"7")), match="version 7")
    raises(S.VERSION_MISMATCH, lambda: hd.Graph.from_compiled_plan(h, _with_abi_version(data, b"0")), match="version 0")


def test_a_malformed_abi_version_is_a_plugin_error():
    from hipdnn_iree.plugins.iree_linalg.context import check_abi_version
    for bad in ({}, {"version": "1"}, {"version": True}, {"version": 1.0}):
        raises(S.PLUGIN_ERROR, lambda: check_abi_version(bad), match="malformed")
    check_abi_version({"version": ABI_FORMAT_VERSION})
