"""Issue 19 item 5: no needless work on the main path (counts of real calls, no mocks)."""
import os
import sys

import numpy as np

import hipdnn_iree as hd
from lowering import graph_ir


def _decode_callers(fn):
    """Runs ``fn()``; returns the file of each caller of lowering.graph_ir.decode_graph."""
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
