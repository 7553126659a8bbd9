"""No needless work on the main path (counts of real calls, no mocks)."""
import os
import sys

import numpy as np

import hipdnn_iree as hd
from graph_ir import desc as graph_ir


def _decode_callers(fn):
    """Runs ``fn()``; returns the file of each caller of graph_ir.desc.decode_graph."""
    code, callers = graph_ir.decode_graph.__code__, []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code is code:
            callers.append(frame.f_back.f_code.co_filename)

    old = sys.getprofile()
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(old)
    return callers


def _mlp(rng, n=4):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(uid=1, dim=[n, 8])
    w = g.tensor(uid=2, dim=[8, 8])
    y = g.pointwise(g.matmul(x, w), mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_uid(3)
    return g, {1: rng.standard_normal((n, 8)).astype(np.float32), 2: rng.standard_normal((8, 8)).astype(np.float32)}


def _iree(callers):
    part = os.sep + os.path.join("plugins", "iree_linalg") + os.sep
    return [c for c in callers if part in c]


def test_one_build_decodes_the_graph_once_in_the_iree_engine(cpu, rng, tmp_path):
    """applicability, engine configs and the build share one decode (the session's memo); before,
    the IREE engine decoded the graph three times per g.build (and NUMPY_REFERENCE once more)."""
    h = hd.create_handle(cache=str(tmp_path))
    g, feeds = _mlp(rng)
    callers = _decode_callers(lambda: g.build(h))
    assert len(_iree(callers)) == 1, callers
    assert len(callers) <= 2, callers   # + NUMPY_REFERENCE's own applicability check
    out = np.zeros((4, 8), np.float32)
    g.execute(h, {**feeds, 3: out})
    np.testing.assert_allclose(out, np.maximum(feeds[1] @ feeds[2], 0), rtol=1e-5, atol=1e-5)
    # the same graph built again on the handle: no decode at all in the IREE engine
    g2, _ = _mlp(rng)
    assert len(_iree(_decode_callers(lambda: g2.build(h)))) == 0


def test_session_memo_is_bounded_and_keyed_by_content(cpu, rng):
    from hipdnn_iree.plugins.iree_linalg import build as _build
    from hipdnn_iree.plugins.iree_linalg.session import IreeSession
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    s = IreeSession(None, parse_target("llvm-cpu"))
    graphs = []
    for n in range(1, _build.MEMO_GRAPHS + 3):
        g, _ = _mlp(rng, n)
        g.validate()
        graphs.append(graph_ir.encode_graph(g._desc))
    for data in graphs:
        assert _build.decode(data, s) == graph_ir.decode_graph(data)
        assert _build.decode(bytearray(data), s) is _build.decode(data, s)   # equal bytes: one entry
    assert len(s.decoded_graphs) == _build.MEMO_GRAPHS
    assert list(s.decoded_graphs) == graphs[-_build.MEMO_GRAPHS:]


def _reference_envelope(env) -> bytes:
    """The version-1 envelope as a FlatBuffers builder writes it with the payload copied in (what
    backend/envelope.py did before it gathered)."""
    import flatbuffers
    from hipdnn_iree.backend import envelope as E
    payload = b"".join(bytes(p) for p in (env.plugin_payload if isinstance(env.plugin_payload, list)
                                          else [env.plugin_payload]))
    b = flatbuffers.Builder(len(payload) + 1024)
    p = E._aligned_bytes(b, payload)
    u = E._uids(b, env.tensor_uids)
    b.StartObject(6 if env.is_override_shape_enabled else 5)
    b.PrependUint32Slot(0, env.version, 0)
    b.PrependInt64Slot(1, env.engine_id, 0)
    b.PrependInt64Slot(2, env.workspace_size, 0)
    b.PrependUOffsetTRelativeSlot(3, u, 0)
    b.PrependUOffsetTRelativeSlot(4, p, 0)
    if env.is_override_shape_enabled:
        b.PrependBoolSlot(5, True, False)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def test_gathered_envelope_is_byte_identical(rng):
    """The envelope written around a placeholder and joined with the payload's buffers is the one a
    builder writes with the payload copied in, for every payload length mod 64 and some large ones."""
    from hipdnn_iree.backend import envelope as E
    for n in [*range(0, 131), 4096, 65536 + 17, (1 << 20) + 3]:
        payload = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        k = int(rng.integers(0, n + 1))
        for uids, override in (((), False), ((1, 2, 3), False), (tuple(range(1, 18)), True)):
            env = E.Envelope(1, 42, 7, uids, payload, is_override_shape_enabled=override)
            want = _reference_envelope(env)
            assert E.encode(env) == want
            parts = E.Envelope(1, 42, 7, uids, [payload[:k], memoryview(payload)[k:]],
                               is_override_shape_enabled=override)
            got = E.encode(parts)
            assert type(got) is bytes and got == want
            if uids and n:
                assert bytes(E.decode(got).plugin_payload) == payload


def test_serialize_copies_the_module_once(cpu, rng):
    """serialize_execution_plan holds at most the result plus small change at its peak (the .vmfb
    goes from the compiled context into the envelope in one join); before, the FUSPLAN join, the
    builder's buffer, its Output slice and bytes() made the peak 4.2x the plan's size."""
    import tracemalloc
    from hipdnn_iree import backend
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x, w = g.tensor(uid=1, dim=[64, 64]), g.tensor(uid=2, dim=[64, 64])
    g.matmul(x, w).set_output(True).set_uid(3)
    g.build(cpu)
    plan = g._require_plan("serialize_compiled_plan")
    first = backend.serialize_execution_plan(plan)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        data = backend.serialize_execution_plan(plan)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert data == first and len(data) > 8192
    assert peak < 1.6 * len(data), (peak, len(data))
    # the public call adds no copy of its own (it was 2 more: a size query + fill, then bytes())
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        public = g.serialize_compiled_plan()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert public == data and peak < 1.6 * len(data), (peak, len(data))
    # the plan restores and computes the product
    r = hd.Graph().deserialize_compiled_plan(cpu, data)
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    out = np.zeros((64, 64), np.float32)
    r.execute(cpu, {1: a, 2: b, 3: out})
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_compile_cache_writes_the_module_without_copying_it(tmp_path, rng):
    """A cache entry is written as header, meta and the module's own buffer (before: meta + module,
    then header + body: two copies); what is read back is the module."""
    import tracemalloc
    from hipdnn_iree.plugins.iree_linalg import cache as _cache
    store = _cache.CompileCache(str(tmp_path), 1 << 30)
    vmfb = rng.integers(0, 256, 4 << 20, dtype=np.uint8).tobytes()
    module = _cache.CachedModule(vmfb, {"entry": "main"}, 1, ("--flag",), None, "test")
    key = "ab" * 32
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        assert store.put(key, module)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak < 0.25 * len(vmfb), peak
    got = store.get(key)
    assert got is not None and got.vmfb == vmfb and got.abi == {"entry": "main"} and got.flags == ("--flag",)
