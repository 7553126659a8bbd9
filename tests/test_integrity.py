"""Compatibility checks, plan identity, integrity (digest, signatures), size bounds,
plan-tensor queries, attribute semantics and atomic plan files."""
import dataclasses
import os
import signal
import struct
import textwrap

import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree import backend
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
from hipdnn_iree.plugins.iree_linalg import IreeLinalgPlugin
from harness import raises, random_array, run_python

S = hd.Status
A = backend.Attribute




def build_mm(handle):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(name="A", uid=1, dim=[4, 8]), g.tensor(name="B", uid=2, dim=[8, 5], stride=[1, 8])
    g.matmul(a, b).set_output(True).set_uid(3).set_name("C")
    g.build(handle)
    return g


@pytest.fixture(scope="module")
def built():
    h = hd.create_handle()
    return h, build_mm(h)


CORPUS_V2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "plan_v2_cpu.plan")


def reencode(data, **changes):
    """Envelope fields changed, payload kept (a v2 plan keeps its layout, its digest refilled)."""
    env = _envelope.decode(data)
    return _envelope.encode(dataclasses.replace(env, plugin_payload=bytes(env.plugin_payload), **changes))


def repack(data, signing_key=None, keep_signature=False, **meta_changes):
    """FUSPLAN metadata fields changed; the digest refilled, the signature remade with
    ``signing_key`` or, with ``keep_signature``, the old one kept (a tampered plan)."""
    env = _envelope.decode(data)
    fp = _fusplan.unpack(env.plugin_payload)
    meta = dataclasses.replace(fp.metadata, **meta_changes)
    payload = _fusplan.pack(bytes(fp.body), fp.payload_kind, meta, signing_key,
                            _fusplan.envelope_fields(env.engine_id, env.workspace_size, env.tensor_uids))
    if keep_signature:
        new = _fusplan.unpack(payload)
        raw = _fusplan._encode_metadata(dataclasses.replace(new.metadata, signature=fp.metadata.signature))
        hsize = -(-(20 + len(raw)) // 64) * 64
        payload = (struct.pack("<8sHHII", b"FUSPLAN\0", 1, 1, fp.payload_kind, hsize) + raw
                   + bytes(hsize - 20 - len(raw)) + bytes(fp.body))
    return _envelope.encode(dataclasses.replace(env, plugin_payload=payload))


def test_v1_written_and_0_1_v2_still_readable(built, rng):
    h, g = built
    v1 = g.serialize_compiled_plan()
    assert backend.serialize_execution_plan(g.get_execution_plan(), envelope_version=1) == v1
    assert _envelope.decode(v1).version == 1
    raises(S.NOT_SUPPORTED, lambda: backend.serialize_execution_plan(g.get_execution_plan(), envelope_version=2),
           match="read-only")
    v2 = open(CORPUS_V2, "rb").read()
    assert _envelope.decode(v2).layout == _envelope.LAYOUT_LEGACY_V2
    r = hd.Graph.from_compiled_plan(h, v1)
    a, b = random_array([4, 8], rng=rng), random_array([8, 5], rng=rng, strides=[1, 8])
    c = np.zeros((4, 5), np.float32)
    r.execute(h, {1: a, 2: b, 3: c})
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    e = raises(S.NOT_SUPPORTED, lambda: hd.Graph.from_compiled_plan(h, reencode(v1, version=3)))
    assert "version 3" in str(e) and "1, 2" in str(e)


def test_body_digest_checked_first(built):
    h, g = built
    data = bytearray(g.serialize_compiled_plan())
    env = _envelope.decode(bytes(data))
    fp = _fusplan.unpack(env.plugin_payload)
    # flip the first byte of the module: a digest mismatch, before IREE sees a byte of it
    data[env.payload_offset + fp.header_size] ^= 0xFF
    e = raises(S.PLUGIN_ERROR, lambda: hd.Graph.from_compiled_plan(h, bytes(data)), match="digest mismatch")
    assert fp.metadata.body_sha256.hex() in str(e)
    for digest in (b"", b"\x01" * 31):
        raw = _fusplan._encode_metadata(dataclasses.replace(fp.metadata, body_sha256=digest))
        hsize = -(-(20 + len(raw)) // 64) * 64
        payload = struct.pack("<8sHHII", b"FUSPLAN\0", 1, 1, 2, hsize) + raw + bytes(hsize - 20 - len(raw)) + bytes(fp.body)
        bad = _envelope.encode(dataclasses.replace(env, plugin_payload=payload))
        raises(S.PLUGIN_ERROR, lambda: hd.Graph.from_compiled_plan(h, bad), match="body_sha256")
    # 0.1.0's version-2 envelope: its own payload digest is still checked
    v2 = bytearray(open(CORPUS_V2, "rb").read())
    env2 = _envelope.decode(bytes(v2))
    v2[env2.payload_offset + 40] ^= 0xFF
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, bytes(v2)), match="digest mismatch")


def test_signing(built):
    h, g = built
    signed = g.serialize_compiled_plan(signing_key=b"k1")
    unsigned = g.serialize_compiled_plan()
    assert _fusplan.unpack(_envelope.decode(signed).plugin_payload).metadata.signature
    assert hd.Graph.from_compiled_plan(h, signed, verify_key=b"k1").get_compiled_plan_tensor_uids() == [1, 2, 3]
    assert hd.Graph.from_compiled_plan(h, signed).get_compiled_plan_tensor_uids() == [1, 2, 3]  # no key: not checked
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, signed, verify_key=b"k2"), match="does not verify")
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, unsigned, verify_key=b"k1"), match="unsigned")
    # the signature covers the envelope's fields too: tampering with workspace_size breaks it
    env = _envelope.decode(signed)
    tampered = _envelope.encode(dataclasses.replace(env, plugin_payload=bytes(env.plugin_payload), workspace_size=64))
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, tampered, verify_key=b"k1"), match="does not verify")
    tampered = _envelope.encode(dataclasses.replace(env, plugin_payload=bytes(env.plugin_payload), tensor_uids=(1, 2, 4)))
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, tampered, verify_key=b"k1"), match="does not verify")
    # ... and the metadata: a changed target with the old signature does not verify; re-signing needs the key
    tampered = repack(signed, keep_signature=True, target_arch="llvm-cpu:x86-64")
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, tampered, verify_key=b"k1"), match="does not verify")
    resigned = repack(signed, signing_key=b"k1", producer_version="9.9")
    hd.Graph.from_compiled_plan(h, resigned, verify_key=b"k1")
    raises(S.BAD_PARAM, lambda: g.serialize_compiled_plan(signing_key=b""), match="signing_key")
    # a signed 0.1.0 version-2 plan is not in the corpus; its envelope signature path stays tested here
    v2 = _envelope.decode(open(CORPUS_V2, "rb").read())
    v2s = _envelope.encode(dataclasses.replace(v2, plugin_payload=bytes(v2.plugin_payload)), signing_key=b"k1")
    hd.Graph.from_compiled_plan(h, v2s, verify_key=b"k1")
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, v2s, verify_key=b"k2"), match="does not verify")


def test_version_and_target_mismatches(built):
    h, g = built
    data = g.serialize_compiled_plan()
    e = raises(S.VERSION_MISMATCH, lambda: hd.Graph.from_compiled_plan(h, repack(data, compiler_version="3.99.1")))
    assert "3.99.1" in str(e) and "3.13" in str(e)
    e = raises(S.NOT_SUPPORTED, lambda: hd.Graph.from_compiled_plan(h, repack(data, target_arch="rocm:gfx942")))
    assert "rocm:gfx942" in str(e) and "local-task" in str(e)
    e = raises(S.NOT_SUPPORTED, lambda: hd.Graph.from_compiled_plan(h, repack(data, target_arch="npu:x")))
    # arch checks against the handle's GPU (plugin bound without creating a device)
    from hipdnn_iree.plugins.iree_linalg.session import IreeSession
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    p = IreeLinalgPlugin()
    s = IreeSession("hip://0", parse_target("rocm:gfx942"))
    e = raises(S.NOT_SUPPORTED, lambda: p.check_plan_compatibility({"target_arch": "rocm:gfx90a"}, session=s))
    assert "gfx90a" in str(e) and "gfx942" in str(e)
    p.check_plan_compatibility({"target_arch": "rocm:gfx942", "compiler_version": "3.13.0"}, session=s)
    s = IreeSession("cuda://0", parse_target("cuda:sm_80"))
    raises(S.NOT_SUPPORTED, lambda: p.check_plan_compatibility({"target_arch": "cuda:sm_89"}, session=s), match="sm_89")
    p.check_plan_compatibility({"target_arch": "cuda:sm_75"}, session=s)


def test_unknown_plugin_named_in_error(built):
    h, g = built
    e = raises(S.INTERNAL_ERROR, lambda: hd.Graph.from_compiled_plan(h, reencode(g.serialize_compiled_plan(),
                                                                                  engine_id=42)))
    assert "42" in str(e) and "IREE_LINALG" in str(e)
    # a 0.1.0 plan names its writer (the version-1 envelope has no plugin identity: RFC 0009)
    e = raises(S.INTERNAL_ERROR, lambda: hd.Graph.from_compiled_plan(h, reencode(open(CORPUS_V2, "rb").read(),
                                                                                  engine_id=42)))
    assert "hipdnn_iree.iree_linalg" in str(e) and "42" in str(e)


def test_size_bounds(built, monkeypatch):
    h, g = built
    data = g.serialize_compiled_plan()
    # NOTE: the limit is the handle's, read when it is made (backend/handle.py HandleSettings)
    monkeypatch.setenv("HIPDNN_IREE_MAX_PLAN_BYTES", str(len(data) - 1))
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(hd.create_handle(), data), match="limit")
    monkeypatch.undo()
    monkeypatch.setattr(_envelope, "MAX_TENSOR_UIDS", 2)
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, data), match="tensor_uids")
    monkeypatch.undo()
    raises(S.PLUGIN_ERROR, lambda: hd.Graph.from_compiled_plan(h, repack(data, plugin_name="x" * 5000)), match="limit")
    # a vector length that claims more bytes than exist is caught before any copy
    bad = bytearray(data)
    env = _envelope.decode(data)
    at = env.payload_offset - 4
    bad[at:at + 4] = (2**31 - 1).to_bytes(4, "little")
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, bytes(bad)), match="limit")
    bad[at:at + 4] = (len(data) * 2).to_bytes(4, "little")
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, bytes(bad)), match="runs past")


def test_plan_tensors_and_attributes(built):
    h, g = built
    r = hd.Graph.from_compiled_plan(h, g.serialize_compiled_plan())
    for graph in (g, r):
        ts = graph.get_compiled_plan_tensors()
        assert [(t.uid, t.name, t.role, t.dims, t.strides, t.data_type) for t in ts] == [
            (1, "A", "input", (4, 8), (8, 1), hd.DataType.FLOAT),
            (2, "B", "input", (8, 5), (1, 8), hd.DataType.FLOAT),
            (3, "C", "output", (4, 5), (5, 1), hd.DataType.FLOAT)]
    plan = r.get_execution_plan()
    # Attribute semantics of a restored plan (README "Restored plans"):
    assert plan.get_attribute(A.EXECUTION_PLAN_TENSOR_UIDS_EXT) == [1, 2, 3]
    assert plan.get_attribute(A.EXECUTION_PLAN_WORKSPACE_SIZE) == 0
    assert plan.get_attribute(A.EXECUTION_PLAN_ENGINE_ID_EXT) == hd.engine_id_from_name("IREE_LINALG")
    assert plan.get_attribute(A.EXECUTION_PLAN_HANDLE) is h
    assert len(plan.get_attribute(A.EXECUTION_PLAN_TENSORS_EXT)) == 3
    cfg = plan.get_attribute(A.EXECUTION_PLAN_ENGINE_CONFIG)   # third edition: it travels in the plan
    assert (cfg.engine_name, cfg.knobs) == ("IREE_LINALG", {})
    built_plan = g.get_execution_plan()
    assert built_plan.get_attribute(A.EXECUTION_PLAN_ENGINE_CONFIG).engine_name == "IREE_LINALG"
    # allocating from the plan alone, as a caller who did not build it
    bufs = {t.uid: np.ones(t.dims, np.float32) for t in plan.get_attribute(A.EXECUTION_PLAN_TENSORS_EXT)}
    bufs[2] = np.ones((5, 8), np.float32).T
    r.execute(h, bufs)
    assert np.all(bufs[3] == 8.0)
    r.release()
    raises(S.NOT_INITIALIZED, lambda: r.get_compiled_plan_tensors())


def test_save_and_load_plan(built, tmp_path):
    h, g = built
    data = g.serialize_compiled_plan()
    path = tmp_path / "p.plan"
    hd.save_plan(path, data)
    assert hd.load_plan(path) == data
    assert [p.name for p in tmp_path.iterdir()] == ["p.plan"]  # no temp files left
    raises(S.BAD_PARAM, lambda: hd.load_plan(tmp_path / "missing.plan"), match="missing.plan")
    raises(S.BAD_PARAM, lambda: hd.save_plan(tmp_path / "nodir" / "x.plan", data), match="nodir")
    raises(S.BAD_PARAM, lambda: hd.save_plan(path, b""))


def test_crash_mid_write_never_leaves_truncated_plan(built, tmp_path):
    """A writer killed (SIGKILL) half-way through save_plan leaves the old file intact."""
    h, g = built
    path = tmp_path / "p.plan"
    old = b"old plan bytes"
    path.write_bytes(old)
    src = tmp_path / "new.bin"
    src.write_bytes(g.serialize_compiled_plan() * 50)
    p = run_python(textwrap.dedent(f"""
        import os, signal
        import hipdnn_iree as hd
        real_fsync = os.fsync
        def die(fd):   # the data is half on disk: die before rename
            os.kill(os.getpid(), signal.SIGKILL)
        os.fsync = die
        hd.save_plan({str(path)!r}, open({str(src)!r}, "rb").read())
    """))
    assert p.returncode == -signal.SIGKILL
    assert path.read_bytes() == old
    leftovers = [x.name for x in tmp_path.iterdir() if x.name not in ("p.plan", "new.bin")]
    assert all(x.endswith(".tmp") for x in leftovers)  # only an orphan temp file, never a partial p.plan
