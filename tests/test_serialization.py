"""Compiled-plan serialization: the RFC's frontend/backend API, status rules and malformed input."""
import struct

import flatbuffers
import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree import backend
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.flatbuffers_sdk import execution_plan_generated as E
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
from hipdnn_iree.plugins.iree_linalg import ENGINE_ID as IREE_ID, IreeLinalgPlugin
from hipdnn_iree.plugins.numpy_reference import ENGINE_ID as REF_ID, NumpyReferencePlugin
from harness import raises, random_array

S = hd.Status


def matmul_graph(m=4, k=8, n=5):
    g = hd.Graph(name="mm", io_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(name="A", uid=1, dim=[m, k]), g.tensor(name="B", uid=2, dim=[k, n])
    g.matmul(a, b).set_output(True).set_uid(3)
    return g


@pytest.fixture(scope="module")
def plan_bytes():
    h = hd.create_handle()
    g = matmul_graph()
    g.build(h)
    return g.serialize_compiled_plan()




def envelope(version=1, engine_id=IREE_ID, workspace=0, uids=(1, 2, 3), payload=b"x", omit=()):
    """Hand-built envelope, optionally omitting fields (to test missing-field rules)."""
    b = flatbuffers.Builder(256)
    p = b.CreateByteVector(payload) if "payload" not in omit else None
    if "uids" not in omit:
        b.StartVector(8, len(uids), 8)
        for u in reversed(uids):
            b.PrependInt64(u)
        u_off = b.EndVector()
    E.SerializedExecutionPlanStart(b)
    E.SerializedExecutionPlanAddVersion(b, version)
    E.SerializedExecutionPlanAddEngineId(b, engine_id)
    E.SerializedExecutionPlanAddWorkspaceSize(b, workspace)
    if "uids" not in omit:
        E.SerializedExecutionPlanAddTensorUids(b, u_off)
    if p is not None:
        E.SerializedExecutionPlanAddPluginPayload(b, p)
    b.Finish(E.SerializedExecutionPlanEnd(b))
    return bytes(b.Output())


def test_roundtrip_frontend(cpu, plan_bytes, rng):
    r = hd.Graph.from_compiled_plan(cpu, plan_bytes)
    assert r.get_compiled_plan_tensor_uids() == [1, 2, 3]
    assert r.get_workspace_size() == 0
    assert r.get_execution_plan_engine_id() == IREE_ID == hd.engine_id_from_name("IREE_LINALG")
    a, b = random_array([4, 8], rng=rng), random_array([8, 5], rng=rng)
    c = np.full((4, 5), np.nan, np.float32)
    r.execute(cpu, {1: a, 2: b, 3: c})
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    r2 = hd.Graph()
    r2.from_compiled_plan_binary(cpu, plan_bytes)
    assert r2.to_compiled_plan_binary() == plan_bytes  # a restored plan re-serializes to the same bytes


def test_envelope_fields(plan_bytes):
    """Version 1, the RFC's five fields only; identity, target and digest in FUSPLAN 1.1's metadata;
    the module 64-byte aligned in the file."""
    env = _envelope.decode(plan_bytes)
    assert (env.version, env.engine_id, env.workspace_size, env.tensor_uids) == (1, IREE_ID, 0, (1, 2, 3))
    assert env.layout == _envelope.LAYOUT_RFC and env.plugin_name == "" and env.payload_sha256 == b""
    root = struct.unpack_from("<I", plan_bytes)[0]
    vt = root - struct.unpack_from("<i", plan_bytes, root)[0]
    assert struct.unpack_from("<H", plan_bytes, vt)[0] == 4 + 2 * 5      # a vtable of exactly five slots
    fp = _fusplan.unpack(env.plugin_payload)
    assert (fp.format_major, fp.format_minor, fp.payload_kind) == (1, 1, 2)
    meta = fp.metadata
    assert (meta.plugin_name, meta.plugin_version, meta.producer_version) == ("hipdnn_iree.iree_linalg",
                                                                              hd.__version__, hd.__version__)
    assert (meta.target_device, meta.target_arch) == ("local", "llvm-cpu:host")
    assert meta.compiler_version.startswith("3.13") and meta.signature == b""
    import hashlib
    assert meta.body_sha256 == hashlib.sha256(fp.body).digest()
    magic, major, minor, kind, hsize = struct.unpack_from("<8sHHII", env.plugin_payload)
    assert (magic, major, minor, kind) == (b"FUSPLAN\0", 1, 1, 2) and hsize == fp.header_size
    assert (env.payload_offset + hsize) % 64 == 0 and hsize % 64 == 0
    assert plan_bytes[env.payload_offset + hsize:].startswith(bytes(fp.body[:16]))
    assert len(fp.body) == len(env.plugin_payload) - hsize


def test_backend_two_call_pattern(cpu):
    g = matmul_graph()
    g.build(cpu)
    plan = g.get_execution_plan()
    n = backend.get_serialized_execution_plan(plan, 0, None)
    assert n > 20
    small = bytearray(n - 1)
    raises(S.BAD_PARAM_SIZE_INSUFFICIENT, backend.get_serialized_execution_plan, plan, n - 1, small)
    assert small == bytearray(n - 1)  # untouched
    buf = bytearray(n + 10)
    assert backend.get_serialized_execution_plan(plan, n + 10, buf) == n
    plan2 = backend.create_and_deserialize_execution_plan(cpu, bytes(buf[:n]))
    assert plan2.get_attribute(backend.Attribute.EXECUTION_PLAN_TENSOR_UIDS_EXT) == [1, 2, 3]
    assert plan2.get_attribute(backend.Attribute.EXECUTION_PLAN_WORKSPACE_SIZE) == 0
    # the engine config travels in the plan (FUSPLAN metadata)
    assert plan2.get_attribute(backend.Attribute.EXECUTION_PLAN_ENGINE_CONFIG).engine_name == "IREE_LINALG"
    assert plan.get_attribute(backend.Attribute.EXECUTION_PLAN_ENGINE_CONFIG).engine_name == "IREE_LINALG"
    plan.release()
    raises(S.NOT_INITIALIZED, backend.get_serialized_execution_plan, plan, 0, None)


def test_serialize_needs_a_built_plan():
    raises(S.NOT_INITIALIZED, matmul_graph().serialize_compiled_plan)


def test_reference_engine_is_not_serializable(cpu):
    g = matmul_graph()
    g.set_preferred_engine_id_ext("NUMPY_REFERENCE")
    g.build(cpu)
    assert g.get_execution_plan_engine_id() == REF_ID
    raises(S.NOT_SUPPORTED, g.serialize_compiled_plan, match="NUMPY_REFERENCE")


@pytest.mark.parametrize("data,status,match", [
    (None, S.BAD_PARAM_NULL_POINTER, "None"),
    (b"", S.BAD_PARAM, "empty"),
    (b"\x00" * 3, S.BAD_PARAM, "FlatBuffer"),
    (b"not a flatbuffer at all, just text", S.BAD_PARAM, "FlatBuffer"),
    (bytes(range(256)) * 4, S.BAD_PARAM, "FlatBuffer"),
    ("a string", S.BAD_PARAM, "bytes-like"),
])
def test_malformed_envelopes(cpu, data, status, match):
    raises(status, backend.create_and_deserialize_execution_plan, cpu, data, match=match)


def test_truncated_envelopes_never_escape(cpu, plan_bytes):
    env = _envelope.decode(plan_bytes)
    end = env.payload_offset + len(env.plugin_payload)
    # NOTE: the 64-byte aligned payload may be followed by padding: cutting only that still restores
    assert len(plan_bytes) - end < 64
    hd.Graph.from_compiled_plan(cpu, plan_bytes[:end])
    for cut in list(range(0, 64)) + list(range(64, end, 97)):
        with pytest.raises(hd.HipdnnError) as ei:
            hd.Graph.from_compiled_plan(cpu, plan_bytes[:cut])
        assert ei.value.status in (S.BAD_PARAM, S.PLUGIN_ERROR), (cut, str(ei.value))


@pytest.mark.parametrize("kwargs,status,match", [
    (dict(version=0), S.NOT_SUPPORTED, "version 0"),
    (dict(version=99), S.NOT_SUPPORTED, "version 99"),
    (dict(omit=("uids",)), S.BAD_PARAM, "tensor_uids"),
    (dict(uids=()), S.BAD_PARAM, "tensor_uids"),
    (dict(omit=("payload",)), S.BAD_PARAM, "plugin_payload"),
    (dict(payload=b""), S.BAD_PARAM, "plugin_payload"),
    (dict(workspace=-1), S.BAD_PARAM, "workspace_size"),
    (dict(engine_id=12345), S.INTERNAL_ERROR, "12345"),
    (dict(engine_id=REF_ID), S.NOT_SUPPORTED, "serialization hooks"),
])
def test_envelope_rules(cpu, kwargs, status, match):
    raises(status, backend.create_and_deserialize_execution_plan, cpu, envelope(**kwargs), match=match)


@pytest.mark.parametrize("payload,match", [
    (b"FUSPLAN\0\x01", "shorter than"),
    (b"NOTAPLAN" + struct.pack("<HHII", 1, 0, 2, 20) + b"x", "magic"),
    (struct.pack("<8sHHII", b"FUSPLAN\0", 2, 0, 2, 20) + b"x", "major"),
    (struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 7, 20) + b"x", "payload_kind 7"),
    (struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 1, 20) + b"x", "payload_kind 1"),
    (struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 2, 12) + b"x", "header_size 12"),
    (struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 2, 20), "header_size 20"),      # empty body
    (struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 2, 999) + b"x", "header_size 999"),
    (struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 2, 20) + b"not a vmfb" * 10, "not a loadable IREE module"),
])
def test_fusplan_rejections_are_plugin_errors(cpu, payload, match):
    raises(S.PLUGIN_ERROR, backend.create_and_deserialize_execution_plan, cpu, envelope(payload=payload), match=match)


def test_fusplan_minor_bump_and_longer_header_are_readable(cpu, plan_bytes, rng):
    """Minor 0 (0.1's 20-byte header, or longer: skipped) and a future minor (metadata first,
    then bytes this reader does not know, inside header_size) both restore."""
    env = _envelope.decode(plan_bytes)
    fp = _fusplan.unpack(env.plugin_payload)
    body = bytes(fp.body)
    minor0 = struct.pack("<8sHHII", b"FUSPLAN\0", 1, 0, 2, 28) + b"EXTRAHDR" + body
    head = bytes(env.plugin_payload[:fp.header_size])
    future = struct.pack("<8sHHII", b"FUSPLAN\0", 1, 7, 2, fp.header_size + 64) + head[20:] + b"\x55" * 64 + body
    for payload in (minor0, future, _fusplan.pack(body, minor=0)):
        r = hd.Graph.from_compiled_plan(cpu, envelope(payload=payload))
        a, b = random_array([4, 8], rng=rng), random_array([8, 5], rng=rng)
        c = np.zeros((4, 5), np.float32)
        r.execute(cpu, {1: a, 2: b, 3: c})
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    # minor 1 without its metadata block is damage
    raises(S.PLUGIN_ERROR, hd.Graph.from_compiled_plan, cpu,
           envelope(payload=struct.pack("<8sHHII", b"FUSPLAN\0", 1, 1, 2, 20) + body), match="no metadata")


def test_restored_graph_refuses_graph_calls(cpu, plan_bytes):
    r = hd.Graph.from_compiled_plan(cpu, plan_bytes)
    for call in (lambda: r.tensor(uid=9, dim=[1]), r.validate, lambda: r.build_operation_graph(cpu),
                 r.create_execution_plans, r.check_support, r.build_plans, lambda: r.build(cpu),
                 lambda: r.set_preferred_engine_id_ext("NUMPY_REFERENCE")):
        e = raises(S.NOT_SUPPORTED, call)
        assert "restored from a compiled plan" in str(e)
    raises(S.BAD_PARAM, lambda: matmul_graph().deserialize_compiled_plan(cpu, plan_bytes), match="empty Graph")


def test_plan_for_another_target_fails_at_deserialize():
    amd = hd.create_handle(device=None, target="rocm:gfx942")
    g = matmul_graph()
    g.build(amd)
    data = g.serialize_compiled_plan()
    assert b"rocm-hsaco-fb" in data
    e = raises(S.NOT_SUPPORTED, hd.Graph.from_compiled_plan, hd.create_handle(), data)
    assert "rocm:gfx942" in str(e) and "local-task" in str(e)
    # the compile-only handle restores it (for inspection) but cannot execute
    r = hd.Graph.from_compiled_plan(amd, data)
    assert r.get_compiled_plan_tensor_uids() == [1, 2, 3]
    raises(S.NOT_INITIALIZED, r.execute, amd, {1: np.zeros((4, 8), np.float32), 2: np.zeros((8, 5), np.float32),
                                                3: np.zeros((4, 5), np.float32)}, match="device")


@pytest.mark.parametrize("target,fmt", [("rocm:gfx942", b"rocm-hsaco-fb"), ("rocm:gfx90a", b"rocm-hsaco-fb"),
                                        ("cuda:sm_80", b"cuda-nvptx-fb"), ("llvm-cpu", b"embedded-elf-x86_64")])
def test_compile_only_handles(target, fmt):
    h = hd.create_handle(device=None, target=target)
    g = matmul_graph()
    g.build(h)
    data = g.serialize_compiled_plan()
    assert fmt in data
    arch = target.split(":")[1].encode() if ":" in target else b""
    assert arch in data


class RecordingPlugin(IreeLinalgPlugin):
    """The IREE plugin with instrumented serialization hooks."""

    name = "recording"

    def __init__(self, payload=None):
        super().__init__()
        self.destroyed = []
        self.payload = payload

    def serialize_execution_context(self, ctx, engine_config=None, plan_info=None):
        return self.payload if self.payload is not None else super().serialize_execution_context(ctx, engine_config,
                                                                                                 plan_info)

    def destroy_serialized_execution_context(self, serialized):
        # NOTE: the IREE engine hands the backend (plan_info gather=True) a list of buffers
        self.destroyed.append(sum(map(len, serialized)) if isinstance(serialized, list) else len(serialized))


def test_backend_copies_payload_and_always_destroys(cpu):
    p = RecordingPlugin()
    h = hd.create_handle(engine_plugins=[p, NumpyReferencePlugin()])
    g = matmul_graph()
    g.build(h)
    data = g.serialize_compiled_plan()
    assert len(p.destroyed) == 1 and p.destroyed[0] > 20  # serialized once (size query and fill share it), destroyed
    bad = RecordingPlugin(payload=bytearray())
    h2 = hd.create_handle(engine_plugins=[bad])
    g2 = matmul_graph()
    g2.build(h2)
    raises(S.PLUGIN_ERROR, g2.serialize_compiled_plan, match="empty payload")
    assert bad.destroyed == [0]  # destroyed on the error path too
    assert hd.Graph.from_compiled_plan(h, data).get_compiled_plan_tensor_uids() == [1, 2, 3]


class NoHooksPlugin:
    """A minimal engine plugin without serialization hooks (wraps the reference engine)."""

    name = "no_hooks"

    def __init__(self):
        self.inner = NumpyReferencePlugin()
        self.engine_names = {777: "NO_HOOKS"}

    def get_all_engine_ids(self):
        return [777]

    def get_applicable_engine_ids(self, op_graph):
        return [777] if self.inner.get_applicable_engine_ids(op_graph) else []

    def get_workspace_size(self, engine_id, op_graph):
        return 0

    def create_execution_context(self, engine_id, op_graph, engine_config=None):
        return self.inner.create_execution_context(REF_ID, op_graph, engine_config)

    def destroy_execution_context(self, ctx):
        pass

    def execute_op_graph(self, ctx, variant_pack, workspace=None):
        self.inner.execute_op_graph(ctx, variant_pack, workspace)


def test_plugin_without_hooks_loads_and_runs_but_cannot_serialize(rng):
    h = hd.create_handle(engine_plugins=[NoHooksPlugin()])
    g = matmul_graph()
    g.build(h)
    assert g.get_execution_plan_engine_id() == 777
    a, b = random_array([4, 8], rng=rng), random_array([8, 5], rng=rng)
    c = np.zeros((4, 5), np.float32)
    g.execute(h, {1: a, 2: b, 3: c})
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    raises(S.NOT_SUPPORTED, g.serialize_compiled_plan, match="NO_HOOKS")
    raises(S.NOT_SUPPORTED, hd.Graph.from_compiled_plan, h, envelope(engine_id=777), match="serialization hooks")


def test_handle_without_iree_plugin_cannot_restore(plan_bytes):
    h = hd.create_handle(engine_plugins=[NumpyReferencePlugin()])
    raises(S.INTERNAL_ERROR, hd.Graph.from_compiled_plan, h, plan_bytes, match=str(IREE_ID))


def test_plugins_come_from_entry_points():
    from importlib import metadata
    eps = {e.name: e.value for e in metadata.entry_points(group="hipdnn_iree.engine_plugins")}
    assert eps["iree_linalg"] == "hipdnn_iree.plugins.iree_linalg:IreeLinalgPlugin"
    assert eps["numpy_reference"] == "hipdnn_iree.plugins.numpy_reference:NumpyReferencePlugin"
    h = hd.create_handle()
    # the IREE engine also answers for hipDNN's fusilli-provider id (its FUSPLAN kind-1 plans restore here)
    assert sorted(h.resource_manager.engine_ids()) == sorted([IREE_ID, REF_ID, hd.engine_id_from_name("FUSILLI_ENGINE")])


def test_bad_plugin_objects_are_rejected():
    raises(S.PLUGIN_ERROR, lambda: hd.create_handle(engine_plugins=[object()]), match="lacks required")
    raises(S.PLUGIN_ERROR, lambda: hd.create_handle(engine_plugins=[NumpyReferencePlugin(), NumpyReferencePlugin()]),
           match="two plugins")
