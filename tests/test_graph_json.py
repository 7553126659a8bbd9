"""Graph JSON (hipdnn_iree/frontend/graph_json.py): every op kind round-trips to the same canonical graph
bytes, through the descriptors and through ``Graph.to_json`` / ``Graph.from_json``; bad documents
are BAD_PARAM errors naming the problem."""
import dataclasses
import itertools
import json
import math

import pytest

import hipdnn_iree as hd
from hipdnn_iree.frontend import graph_json as _graph_json
from graph_ir.desc import ABSENT, ATTRS_BY_KIND, GraphDesc, NodeDesc, OpKind, TensorDesc, encode_graph

F = hd.DataType.FLOAT


def _sample_attrs(cls, uids, variant: int):
    """Attribute values of every type, with optional inputs left out on odd variants."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        t = f.type if isinstance(f.type, str) else f.type.__name__
        if f.name in cls._IN or f.name in cls._OUT:
            optional = f.default is not dataclasses.MISSING
            kwargs[f.name] = ABSENT if optional and variant % 2 else next(uids)
        elif _graph_json._json_enum(cls.KIND, f.name) is not None:
            members = list(_graph_json._json_enum(cls.KIND, f.name))
            kwargs[f.name] = int(members[variant % len(members)])
        elif t in ("int | None", "bool | None") and variant % 2:
            kwargs[f.name] = None
        elif t in ("bool", "bool | None"):
            kwargs[f.name] = bool(variant % 2)
        elif t == "str":
            kwargs[f.name] = f"op.{variant}"
        elif t == "bytes":
            kwargs[f.name] = bytes(range(variant + 1))
        elif t == "float":
            kwargs[f.name] = [math.nan, 0.125, -math.inf, 1e-30][variant % 4]
        elif t.startswith("tuple"):
            kwargs[f.name] = tuple(range(1 + variant, 3 + variant))
        else:
            kwargs[f.name] = 7 + variant
    return cls(**kwargs)


def _desc_with_every_kind(variant: int) -> GraphDesc:
    uids = itertools.count(10)
    nodes = tuple(NodeDesc(f"{kind.name.lower()}_node", int(F) if variant else 0,
                           _sample_attrs(ATTRS_BY_KIND[kind], uids, variant)) for kind in OpKind)
    # NOTE: the single-tensor fields only (CUSTOM_OP's uid lists take small sample values): the
    # graph stays the one test_graph_schema's hashes were taken of
    used = sorted({getattr(n.attrs, f) for n in nodes for f in (*n.attrs._IN, *n.attrs._OUT)} - {ABSENT})
    tensors = tuple(TensorDesc(u, f"t{u}", int(F), (2, 3), (3, 1), is_virtual=bool(u % 2)) for u in used)
    tensors += (TensorDesc(1, "alpha", int(F), (), (), is_scalar=True, scalar_value=-0.5),
                TensorDesc(2, "nan_scalar", int(hd.DataType.HALF), (), (), is_scalar=True, scalar_value=math.nan))
    return GraphDesc("every_kind", int(F), int(hd.DataType.HALF), int(F) if variant else 0, tensors, nodes)


@pytest.mark.parametrize("variant", [0, 1, 2, 3])
def test_descriptor_round_trip_covers_every_op_kind(variant):
    desc = _desc_with_every_kind(variant)
    text = json.dumps(_graph_json.desc_to_dict(desc), allow_nan=False)   # strict JSON: no NaN/Infinity tokens
    back = _graph_json.dict_to_desc(json.loads(text))
    assert {n.kind for n in back.nodes} == set(OpKind)
    assert encode_graph(back) == encode_graph(desc)
    for a, b in zip(desc.nodes, back.nodes):   # NaN != NaN, so compare field by field
        for f in dataclasses.fields(a.attrs):
            x, y = getattr(a.attrs, f.name), getattr(b.attrs, f.name)
            assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), (a.name, f.name)


def _conv(g):
    x = g.tensor(name="X", uid=1, dim=[2, 4, 8, 8], stride=[256, 1, 32, 4])
    w = g.tensor(name="W", uid=2, dim=[6, 4, 3, 3])
    g.conv_fprop(x, w, padding=[1, 1], stride=[2, 2]).set_output(True).set_uid(3)


def _dgrad(g):
    dy = g.tensor(name="dY", uid=1, dim=[2, 6, 5, 5])
    w = g.tensor(name="W", uid=2, dim=[6, 4, 3, 3])
    g.conv_dgrad(dy, w, padding=[1, 1], stride=[2, 2]).set_dim([2, 4, 10, 10]).set_output(True).set_uid(3)


def _wgrad(g):
    dy = g.tensor(name="dY", uid=1, dim=[2, 6, 5, 5])
    x = g.tensor(name="X", uid=2, dim=[2, 4, 10, 10])
    g.conv_wgrad(dy, x, pre_padding=[1, 0], post_padding=[0, 1], stride=[2, 2]).set_dim([6, 4, 3, 3]) \
        .set_output(True).set_uid(3)


def _pointwise(g):
    a = g.tensor(name="A", uid=1, dim=[4, 5])
    b = g.tensor(name="B", uid=2, dim=[1, 5], stride=[0, 1])
    y = g.pointwise(a, b, mode=hd.PointwiseMode.ADD)
    y = g.pointwise(y, 0.5, mode=hd.PointwiseMode.MUL)
    g.pointwise(y, mode=hd.PointwiseMode.ELU_FWD, alpha=0.3).set_output(True).set_uid(3)


def _matmul(g):
    a = g.tensor(name="A", uid=1, dim=[2, 4, 8])
    b = g.tensor(name="B", uid=2, dim=[1, 8, 5], stride=[40, 1, 8])
    g.matmul(a, b).set_output(True).set_uid(3)


def _reduction(g):
    g.reduction(g.tensor(name="X", uid=1, dim=[8, 16, 4]), mode=hd.ReductionMode.NORM2).set_dim([8, 1, 1]) \
        .set_output(True).set_uid(2)


def _batchnorm(g):
    x = g.tensor(name="X", uid=1, dim=[2, 3, 4, 4])
    stats = [g.tensor(name=n, uid=u, dim=[1, 3, 1, 1]) for u, n in enumerate(["mean", "iv", "scale", "bias"], 2)]
    g.batchnorm_inference(x, *stats).set_output(True).set_uid(9)


def _batchnorm_train(g):
    x = g.tensor(name="X", uid=1, dim=[2, 3, 4, 4], stride=[48, 1, 12, 3])
    s, b, rm, rv = (g.tensor(name=n, uid=u, dim=[1, 3, 1, 1]) for u, n in enumerate(["scale", "bias", "rm", "rv"], 2))
    outs = g.batchnorm(x, s, b, epsilon=1e-3, momentum=0.2, in_running_mean=rm, in_running_var=rv)
    for t, u in zip(outs, range(10, 15)):
        t.set_output(True).set_uid(u)


def _batchnorm_backward(g):
    dy, x = g.tensor(name="DY", uid=1, dim=[2, 3, 4]), g.tensor(name="X", uid=2, dim=[2, 3, 4])
    s, m, v = (g.tensor(name=n, uid=u, dim=[1, 3, 1]) for u, n in enumerate(["scale", "mean", "iv"], 3))
    for t, u in zip(g.batchnorm_backward(dy, x, s, mean=m, inv_variance=v), (10, 11, 12)):
        t.set_output(True).set_uid(u)


def _batchnorm_variance(g):
    x = g.tensor(name="X", uid=1, dim=[2, 3, 4, 4])
    m, v, s, b = (g.tensor(name=n, uid=u, dim=[1, 3, 1, 1]) for u, n in enumerate(["mean", "var", "scale", "bias"], 2))
    g.batchnorm_inference(x, m, scale=s, bias=b, variance=v, epsilon=1e-3).set_output(True).set_uid(9)


def _layernorm(g):
    x = g.tensor(name="X", uid=1, dim=[4, 6])
    s, b = g.tensor(name="scale", uid=2, dim=[1, 6]), g.tensor(name="bias", uid=3, dim=[1, 6])
    y, mean, inv = g.layernorm(x, s, b, epsilon=1e-3, forward_phase=hd.NormFwdPhase.TRAINING)
    y.set_output(True).set_uid(4)
    mean.set_output(True).set_uid(5)
    inv.set_output(True).set_uid(6)


def _rmsnorm(g):
    x = g.tensor(name="X", uid=1, dim=[4, 6])
    g.rmsnorm(x, g.tensor(name="scale", uid=2, dim=[1, 6]), epsilon=1e-6).set_output(True).set_uid(3)


def _sdpa(g):
    q = g.tensor(name="Q", uid=1, dim=[1, 4, 16, 8])
    k, v = (g.tensor(name=n, uid=u, dim=[1, 2, 32, 8]) for u, n in ((2, "K"), (3, "V")))
    mask = g.tensor(name="mask", uid=4, dim=[1, 1, 16, 32])
    g.sdpa(q, k, v, attn_scale=0.25, mask=mask).set_output(True).set_uid(5)


def _sdpa_backward(g):
    q = g.tensor(name="Q", uid=1, dim=[1, 4, 16, 8])
    k, v = (g.tensor(name=n, uid=u, dim=[1, 2, 32, 8]) for u, n in ((2, "K"), (3, "V")))
    o, do = (g.tensor(name=n, uid=u, dim=[1, 4, 16, 8]) for u, n in ((4, "O"), (5, "dO")))
    stats = g.tensor(name="stats", uid=6, dim=[1, 4, 16, 1])
    for t, u in zip(g.sdpa_backward(q, k, v, o, do, stats, attn_scale=0.25, is_causal=True), (7, 8, 9)):
        t.set_output(True).set_uid(u)

def _layernorm_backward(g):
    x, dy = g.tensor(name="X", uid=1, dim=[4, 8]), g.tensor(name="dY", uid=2, dim=[4, 8])
    s = g.tensor(name="scale", uid=3, dim=[1, 8])
    m, iv = g.tensor(name="mean", uid=4, dim=[4, 1]), g.tensor(name="inv_var", uid=5, dim=[4, 1])
    for t, u in zip(g.layernorm_backward(dy, x, s, m, iv), (6, 7, 8)):
        t.set_output(True).set_uid(u)


def _rmsnorm_backward(g):
    x, dy = g.tensor(name="X", uid=1, dim=[4, 8]), g.tensor(name="dY", uid=2, dim=[4, 8])
    s, ir = g.tensor(name="scale", uid=3, dim=[1, 8]), g.tensor(name="inv_rms", uid=4, dim=[4, 1])
    dx, ds, db = g.rmsnorm_backward(dy, x, s, ir, has_dbias=True)
    for t, u in ((dx, 6), (ds, 7), (db, 8)):
        t.set_output(True).set_uid(u)


def _resample(g):
    x = g.tensor(name="X", uid=1, dim=[2, 3, 8, 8])
    y, idx = g.resample(x, hd.ResampleMode.MAXPOOL, [2, 2], [2, 2], [0, 0], [0, 0], generate_index=True)
    y.set_output(True).set_uid(2)
    idx.set_output(True).set_uid(3)


def _resample_backward(g):
    dy = g.tensor(name="dY", uid=1, dim=[2, 3, 4, 4])
    g.resample_backward(dy, hd.ResampleMode.AVGPOOL_INCLUDE_PADDING, [2, 2], [2, 2], [0, 0], [0, 0]) \
        .set_dim([2, 3, 8, 8]).set_output(True).set_uid(2)


def _custom_op(g):
    x, y = g.tensor(name="X", uid=1, dim=[4, 8]), g.tensor(name="Y", uid=2, dim=[8])
    outs = g.custom_op("demo.pair", [x, y, 0.5], [([4, 8], hd.DataType.HALF), {"dims": [4], "name": "sums"}],
                       data=b"\x00\x01opaque")
    for t, u in zip(outs, (3, 4)):
        t.set_output(True).set_uid(u)


def _block_scale_quantize(g):
    x = g.tensor(name="x", uid=1, dim=[4, 64])
    y, s = g.block_scale_quantize(x, 32, axis=1, y_data_type=hd.DataType.FP8_E5M2)
    y.set_output(True).set_uid(2)
    s.set_output(True).set_uid(3)


def _block_scale_dequantize(g):
    q = g.tensor(name="q", uid=1, dim=[4, 64], data_type=hd.DataType.FP4_E2M1)
    s = g.tensor(name="s", uid=2, dim=[4, 4], data_type=hd.DataType.FP8_E4M3)
    g.block_scale_dequantize(q, s, [1, 16]).set_output(True).set_uid(3)


def _moe_grouped_matmul(g):
    tok, w = g.tensor(name="T", uid=1, dim=[1, 6, 4]), g.tensor(name="W", uid=2, dim=[2, 4, 3])
    off = g.tensor(name="O", uid=3, dim=[2, 1, 1], data_type=hd.DataType.INT32)
    idx = g.tensor(name="I", uid=4, dim=[1, 5, 1], data_type=hd.DataType.INT32)
    y = g.moe_grouped_matmul(tok, w, off, token_index=idx, mode=hd.MoeGroupedMatmulMode.GATHER)
    y.set_output(True).set_uid(5)


def _moe_grouped_matmul_backward(g):
    dy, tok = g.tensor(name="dY", uid=1, dim=[1, 6, 3]), g.tensor(name="T", uid=2, dim=[1, 6, 4])
    off = g.tensor(name="O", uid=3, dim=[2, 1, 1], data_type=hd.DataType.INT64)
    g.moe_grouped_matmul_backward(dy, tok, off).set_output(True).set_uid(4)


FRONTEND_GRAPHS = {OpKind.LAYERNORM_BACKWARD: _layernorm_backward, OpKind.RMSNORM_BACKWARD: _rmsnorm_backward,
                   OpKind.RESAMPLE_FWD: _resample, OpKind.RESAMPLE_BWD: _resample_backward,
                   OpKind.POINTWISE: _pointwise, OpKind.MATMUL: _matmul, OpKind.CONV_FPROP: _conv,
                   OpKind.CONV_DGRAD: _dgrad, OpKind.CONV_WGRAD: _wgrad, OpKind.REDUCTION: _reduction,
                   OpKind.BATCHNORM_INFERENCE: _batchnorm, OpKind.BATCHNORM: _batchnorm_train,
                   OpKind.BATCHNORM_BACKWARD: _batchnorm_backward,
                   OpKind.BATCHNORM_INFERENCE_VARIANCE_EXT: _batchnorm_variance,
                   OpKind.LAYERNORM: _layernorm, OpKind.RMSNORM: _rmsnorm,
                   OpKind.SDPA: _sdpa, OpKind.SDPA_BACKWARD: _sdpa_backward, OpKind.CUSTOM_OP: _custom_op,
                   OpKind.MOE_GROUPED_MATMUL: _moe_grouped_matmul,
                   OpKind.MOE_GROUPED_MATMUL_BWD: _moe_grouped_matmul_backward,
                   OpKind.BLOCK_SCALE_QUANTIZE: _block_scale_quantize,
                   OpKind.BLOCK_SCALE_DEQUANTIZE: _block_scale_dequantize}


def test_every_lowered_op_kind_has_a_frontend_round_trip():
    from graph_ir.desc import LOWERED_KINDS
    assert set(FRONTEND_GRAPHS) == set(LOWERED_KINDS)


@pytest.mark.parametrize("kind", list(FRONTEND_GRAPHS), ids=lambda k: k.name)
def test_graph_round_trip_through_json(kind):
    g = hd.Graph(name=f"json_{kind.name.lower()}", io_data_type=F, compute_data_type=F)
    FRONTEND_GRAPHS[kind](g)
    text = g.to_json()
    assert kind.name in text
    r = hd.Graph.from_json(text)
    r.validate()
    assert encode_graph(r._desc) == encode_graph(g._desc)
    assert r.to_json() == text
    assert hd.Graph.from_json(json.loads(text)).validate()._desc == hd.Graph.from_json(text.encode()).validate()._desc


def test_loaded_graph_builds_and_runs(cpu):
    import numpy as np
    g = hd.Graph(name="json_run", io_data_type=F)
    _pointwise(g)
    r = hd.Graph.from_json(g.to_json(indent=None))
    r.set_preferred_engine_id_ext("NUMPY_REFERENCE").build(cpu)   # the IREE engine is covered by test_cli
    a, b = np.ones((4, 5), np.float32), np.arange(5, dtype=np.float32).reshape(1, 5)
    y = np.empty((4, 5), np.float32)
    r.execute(cpu, {1: a, 2: b, 3: y})
    v = (a + b) * 0.5
    np.testing.assert_allclose(y, np.where(v > 0, v, 0.3 * np.expm1(v)), rtol=1e-6)


def _doc():
    g = hd.Graph(name="doc", io_data_type=F)
    _matmul(g)
    return json.loads(g.to_json())


@pytest.mark.parametrize("mutate, status, words", [
    (lambda d: d.update(format="other"), hd.Status.BAD_PARAM, "format"),
    (lambda d: d.update(format_version=99), hd.Status.NOT_SUPPORTED, "format_version 99"),
    (lambda d: d.update(extra=1), hd.Status.BAD_PARAM, "unknown key"),
    (lambda d: d["nodes"][0].update(op="FFT"), hd.Status.BAD_PARAM, "FFT"),
    (lambda d: d["nodes"][0]["inputs"].update(a=999), hd.Status.BAD_PARAM, "uid 999"),
    (lambda d: d["nodes"][0]["inputs"].update(z=1), hd.Status.BAD_PARAM, "unknown key"),
    (lambda d: d["nodes"][0]["inputs"].pop("a"), hd.Status.BAD_PARAM, "a_uid"),
    (lambda d: d["tensors"][0].update(data_type="FLOAT7"), hd.Status.BAD_PARAM, "FLOAT7"),
    (lambda d: d["tensors"][0].update(dims="2x4"), hd.Status.BAD_PARAM, "dims"),
    (lambda d: d["tensors"][0].pop("strides"), hd.Status.BAD_PARAM, "strides"),
    (lambda d: d["tensors"][1].update(uid=1), hd.Status.BAD_PARAM, "uid 1"),
])
def test_bad_documents_are_clear_errors(mutate, status, words):
    d = _doc()
    mutate(d)
    with pytest.raises(hd.HipdnnError) as e:
        hd.Graph.from_json(json.dumps(d))
    assert e.value.status == status and words in str(e.value), str(e.value)


def test_not_json_and_restored_graphs():
    for bad in ("{", b"\xff\xfe", 42):
        with pytest.raises(hd.HipdnnError) as e:
            hd.Graph.from_json(bad)
        assert e.value.status == hd.Status.BAD_PARAM
    restored = hd.Graph()
    restored._restored = True     # NOTE: a restored graph without paying for a compile
    with pytest.raises(hd.HipdnnError) as e:
        restored.to_json()
    assert e.value.status == hd.Status.NOT_SUPPORTED and "restored" in str(e.value)
