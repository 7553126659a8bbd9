"""Plans written now against readers and writers that flatc generates from each public variant of
hipDNN's envelope schema (tests/data/hipdnn_envelope_*.fbs), in both directions."""
import importlib.util
import os
import subprocess

import flatbuffers
import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.backend import envelope as _envelope
from harness import REPO, raises, random_array
from test_schemas import _flatc

S = hd.Status
VARIANTS = ("rfc", "engine_config", "override_flag", "override_alignments")


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    """variant -> the module flatc generates from its schema."""
    out, mods = tmp_path_factory.mktemp("variants"), {}
    for v in VARIANTS:
        d = out / v
        d.mkdir()
        subprocess.run([_flatc(), "--python", "--gen-onefile", "-o", str(d),
                        os.path.join(REPO, "tests", "data", f"hipdnn_envelope_{v}.fbs")], check=True)
        spec = importlib.util.spec_from_file_location(f"variant_{v}", d / f"hipdnn_envelope_{v}_generated.py")
        mods[v] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[v])
    return mods


@pytest.fixture(scope="module")
def plan():
    h = hd.create_handle()
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(uid=1, dim=[4, 8]), g.tensor(uid=2, dim=[8, 5])
    g.matmul(a, b).set_output(True).set_uid(3)
    g.build(h)
    return h, g.serialize_compiled_plan()


def read_with(mod, data) -> dict:
    """Every field a variant's generated reader sees in ``data``."""
    p = mod.SerializedExecutionPlan.GetRootAs(data, 0)
    out = {"version": p.Version(), "engine_id": p.EngineId(), "workspace_size": p.WorkspaceSize(),
           "tensor_uids": list(p.TensorUidsAsNumpy()) if not p.TensorUidsIsNone() else None,
           "plugin_payload": None if p.PluginPayloadIsNone() else p.PluginPayloadAsNumpy().tobytes()}
    if hasattr(p, "EngineConfigIsNone"):
        out["engine_config"] = None if p.EngineConfigIsNone() else p.EngineConfigAsNumpy().tobytes()
    if hasattr(p, "IsOverrideShapeEnabled"):
        out["is_override_shape_enabled"] = p.IsOverrideShapeEnabled()
    if hasattr(p, "TensorAlignmentsIsNone"):
        out["tensor_alignments"] = None if p.TensorAlignmentsIsNone() else list(p.TensorAlignmentsAsNumpy())
    return out


def write_with(mod, version, engine_id, workspace, uids, payload, engine_config=None, flag=None, alignments=None):
    """An envelope written by a variant's generated writer."""
    E = mod
    b = flatbuffers.Builder(len(payload) + 1024)
    p = b.CreateByteVector(payload)
    ec = b.CreateByteVector(engine_config) if engine_config is not None else None
    al = None
    if alignments is not None:
        E.SerializedExecutionPlanStartTensorAlignmentsVector(b, len(alignments))
        for x in reversed(alignments):
            b.PrependInt64(x)
        al = b.EndVector()
    E.SerializedExecutionPlanStartTensorUidsVector(b, len(uids))
    for u in reversed(uids):
        b.PrependInt64(u)
    u = b.EndVector()
    E.SerializedExecutionPlanStart(b)
    E.SerializedExecutionPlanAddVersion(b, version)
    E.SerializedExecutionPlanAddEngineId(b, engine_id)
    E.SerializedExecutionPlanAddWorkspaceSize(b, workspace)
    E.SerializedExecutionPlanAddTensorUids(b, u)
    if ec is not None:
        E.SerializedExecutionPlanAddEngineConfig(b, ec)
    E.SerializedExecutionPlanAddPluginPayload(b, p)
    if flag is not None:
        E.SerializedExecutionPlanAddIsOverrideShapeEnabled(b, flag)
    if al is not None:
        E.SerializedExecutionPlanAddTensorAlignments(b, al)
    b.Finish(E.SerializedExecutionPlanEnd(b))
    return bytes(b.Output())


def slot_table(gen, data) -> dict:
    return {v: read_with(gen[v], data) for v in VARIANTS}


def test_every_public_reader_reads_a_plan_written_now(gen, plan):
    """All five RFC fields right in the RFC reader and both appending forks; their own fields
    read as absent (defaults), nothing misread. The engine_config fork's layout differs in
    slot 4 by design: it sees the payload as its engine_config and no payload of its own, so it
    refuses the plan (missing payload) instead of running wrong bytes."""
    _, data = plan
    env = _envelope.decode(data)
    want = {"version": 1, "engine_id": env.engine_id, "workspace_size": 0, "tensor_uids": [1, 2, 3],
            "plugin_payload": bytes(env.plugin_payload)}
    table = slot_table(gen, data)
    for v in ("rfc", "override_flag", "override_alignments"):
        assert {k: table[v][k] for k in want} == want, v
    assert table["override_flag"]["is_override_shape_enabled"] is False
    assert table["override_alignments"]["is_override_shape_enabled"] is False
    assert table["override_alignments"]["tensor_alignments"] is None
    ec = table["engine_config"]
    assert {k: ec[k] for k in ("version", "engine_id", "workspace_size", "tensor_uids")} == \
        {k: want[k] for k in ("version", "engine_id", "workspace_size", "tensor_uids")}
    assert ec["plugin_payload"] is None and ec["engine_config"] == want["plugin_payload"]


def _check_runs(h, data, rng):
    r = hd.Graph.from_compiled_plan(h, data)
    a, b = random_array([4, 8], rng=rng), random_array([8, 5], rng=rng)
    c = np.full((4, 5), np.nan, np.float32)
    r.execute(h, {1: a, 2: b, 3: c})
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    return r


@pytest.mark.parametrize("variant,extra,layout", [
    ("rfc", {}, _envelope.LAYOUT_RFC),
    ("override_flag", {"flag": True}, _envelope.LAYOUT_FORK_FIELDS),
    ("override_flag", {"flag": False}, _envelope.LAYOUT_RFC),
    ("override_alignments", {"flag": True, "alignments": [256, 64, 16]}, _envelope.LAYOUT_FORK_FIELDS),
    ("override_alignments", {"alignments": [64, 64, 64]}, _envelope.LAYOUT_FORK_FIELDS),
    ("engine_config", {"engine_config": b"\x0c\x00\x00\x00EngineConfig bytes"}, _envelope.LAYOUT_ENGINE_CONFIG),
    ("engine_config", {"engine_config": b""}, _envelope.LAYOUT_ENGINE_CONFIG),
])
def test_plans_from_every_public_writer_restore_here(gen, plan, rng, variant, extra, layout):
    h, data = plan
    env = _envelope.decode(data)
    foreign = write_with(gen[variant], 1, env.engine_id, 0, [1, 2, 3], bytes(env.plugin_payload), **extra)
    got = _envelope.decode(foreign)
    assert got.layout == layout and bytes(got.plugin_payload) == bytes(env.plugin_payload)
    assert got.tensor_uids == (1, 2, 3)
    _check_runs(h, foreign, rng)


def test_foreign_version_2_is_named_not_damaged(gen, plan):
    """A fork's own 'version 2' (flag and alignments after the payload) is not 0.1.0's layout."""
    h, data = plan
    env = _envelope.decode(data)
    foreign = write_with(gen["override_alignments"], 2, env.engine_id, 0, [1, 2, 3], bytes(env.plugin_payload),
                         flag=True, alignments=[64, 64, 64])
    e = raises(S.NOT_SUPPORTED, hd.Graph.from_compiled_plan, h, foreign, match="not hipdnn-iree 0.1.0's")
    assert "damaged" not in str(e) and "version 1" in str(e)
    foreign = write_with(gen["rfc"], 7, env.engine_id, 0, [1, 2, 3], bytes(env.plugin_payload))
    e = raises(S.NOT_SUPPORTED, hd.Graph.from_compiled_plan, h, foreign, match="version 7")
    assert "damaged" not in str(e)


def test_a_damaged_plan_of_a_known_layout_is_damage(gen, plan):
    h, data = plan
    env = _envelope.decode(data)
    foreign = bytearray(write_with(gen["override_alignments"], 1, env.engine_id, 0, [1, 2, 3],
                                   bytes(env.plugin_payload), flag=True, alignments=[64, 64, 64]))
    at = _envelope.decode(bytes(foreign)).payload_offset - 4
    foreign[at:at + 4] = (len(foreign) * 2).to_bytes(4, "little")
    raises(S.BAD_PARAM, hd.Graph.from_compiled_plan, h, bytes(foreign), match="runs past")
