"""Random-graph fuzzer: random shapes, dtypes, layouts and epilogues, each graph built by the IREE engine,
run, and compared with an independent float64 reference (PyTorch on the CPU, in float64, on the same
rounded inputs).

Kinds: ``conv`` (fprop with bias/activation, dgrad, wgrad; 1-3-D; grouped and depthwise; strides,
dilations, padding; channels-first and channels-last), ``matmul`` (batch broadcast, row-major,
column-major and padded-stride operands, bias and activation epilogues, FP8 operands), ``norm``
(layernorm, rmsnorm) and ``sdpa`` (causal, grouped-query heads).

Every case is a JSON-able dict made from one seed: a failing case prints a one-line reproduction
(``python tests/fuzz_ops.py --case '<json>'``). Tolerances scale with the output's precision and the
reduction's length (:func:`tolerance`); errors are measured against the largest reference value (a
contraction's outputs cancel, so per-element relative errors mean nothing near zero).

CPU tier (CI): ``tests/test_fuzz_ops.py``. GPU tier: ``python tests/fuzz_ops.py --device cuda --target
cuda:sm_80 --cases 2000 --size large --json out.json`` (``benchmarks/gpu_run.sh fuzz``). Results count
right, WRONG (no error, numbers off: the fault this hunts) and refused (``hd.HipdnnError`` at build; a
refusal is not a wrong result) cases.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import hipdnn_iree as hd  # noqa: E402
from hipdnn_iree.plugin_sdk.buffers import numpy_dtype  # noqa: E402

DT = {"f32": hd.DataType.FLOAT, "f16": hd.DataType.HALF, "bf16": hd.DataType.BFLOAT16}
ACTS = {"relu": hd.PointwiseMode.RELU_FWD, "gelu": hd.PointwiseMode.GELU_FWD,
        "tanh": hd.PointwiseMode.TANH_FWD, "sigmoid": hd.PointwiseMode.SIGMOID_FWD}
KINDS = ("conv", "matmul", "norm", "sdpa")
# unit roundoff of each output type
EPS = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8, "fp8_e4m3": 2.0 ** -4, "fp8_e5m2": 2.0 ** -3}


# -- case generation ------------------------------------------------------------------------------
def _pick(rng, seq, p=None):
    return seq[int(rng.choice(len(seq), p=p))]


def gen_case(seed: int, kind: str | None = None, size: str = "small") -> dict:
    """One random case, a function of (seed, kind, size) alone."""
    rng = np.random.default_rng(seed)
    kind = kind or _pick(rng, KINDS, p=[0.45, 0.35, 0.1, 0.1])
    big = size == "large"
    return {"kind": kind, "seed": seed, "size": size, **_GEN[kind](rng, big)}


def _gen_conv(rng, big):
    op = _pick(rng, ["fprop", "dgrad", "wgrad"], p=[0.5, 0.25, 0.25])
    rank = _pick(rng, [1, 2, 3], p=[0.2, 0.65, 0.15])
    gkind = _pick(rng, ["none", "grouped", "depthwise"], p=[0.45, 0.4, 0.15])
    g = 1 if gkind == "none" else int(rng.choice([2, 3, 4, 8]))
    step = 8 if big else 4
    cg = int(rng.integers(1, (24 if big else 6) + 1)) * (1 if rng.random() < 0.3 else step // 4 * 2)
    kg = int(rng.integers(1, (24 if big else 6) + 1)) * (1 if rng.random() < 0.3 else step // 4 * 2)
    if gkind == "depthwise":
        g, cg = int(rng.integers(2, (64 if big else 12) + 1)), 1
        kg = int(rng.choice([1, 1, 2]))
    c, k = g * cg, g * kg
    n = int(rng.choice([1, 2, 4] if big else [1, 2, 3]))
    smax = {1: 96, 2: 40, 3: 12}[rank] if big else {1: 24, 2: 12, 3: 6}[rank]
    r = [int(rng.choice([1, 2, 3, 3, 5])) for _ in range(rank)]
    stride = [int(rng.choice([1, 1, 2, 3])) for _ in range(rank)]
    dil = [int(rng.choice([1, 1, 1, 2])) for _ in range(rank)]
    pad = [int(rng.integers(0, (dil[i] * (r[i] - 1)) // 2 + 2)) for i in range(rank)]
    spatial = []
    for i in range(rank):
        lo = max(1, dil[i] * (r[i] - 1) + 1 - 2 * pad[i])
        spatial.append(int(rng.integers(lo, max(lo, smax) + 1)))
    dt = _pick(rng, ["f32", "f16", "bf16"], p=[0.3, 0.4, 0.3])
    layout = _pick(rng, ["first", "last"])
    epi = []
    if op == "fprop":
        if rng.random() < 0.5:
            epi.append("bias")
        if rng.random() < 0.5:
            epi.append(_pick(rng, list(ACTS)))
    return {"op": op, "n": n, "c": c, "k": k, "g": g, "spatial": spatial, "r": r, "stride": stride,
            "dilation": dil, "padding": pad, "dt": dt, "layout": layout, "epilogue": epi}


def _gen_matmul(rng, big):
    dims = []
    for hi in ((2048, 4096, 3328) if big else (96, 96, 160)):
        v = int(rng.integers(1, hi + 1))
        dims.append(v if rng.random() < 0.4 else max(8, v // 8 * 8))
    m, n, k = dims
    b = int(rng.choice([1, 1, 2, 3, 4, 5, 7] + ([32] if big else [])))
    if big:   # keep the float64 reference and the GPU memory in reach
        while b * m * n * k > 4e10:
            m, n = max(8, m // 2), max(8, n // 2)
    bcast = _pick(rng, ["none", "a", "b"], p=[0.5, 0.1, 0.4]) if b > 1 else "none"
    dt = _pick(rng, ["f32", "f16", "bf16", "fp8"], p=[0.25, 0.35, 0.3, 0.1])
    epi = []
    if rng.random() < 0.4:
        epi.append("bias")
    if rng.random() < 0.4:
        epi.append(_pick(rng, list(ACTS)))
    lay = [_pick(rng, ["row", "col", "pad"]) for _ in range(2)]
    out = {"m": m, "n": n, "k": k, "b": b, "bcast": bcast, "dt": dt, "a_layout": lay[0], "b_layout": lay[1],
           "out_layout": _pick(rng, ["row", "row", "pad"]), "epilogue": epi}
    if dt == "fp8":
        out["fp8"] = _pick(rng, ["fp8_e4m3", "fp8_e5m2"])
        out["out_dt"] = _pick(rng, ["f32", "f16", "bf16"])
    if dt in ("f16", "bf16") and rng.random() < 0.25:
        # cuDNN FE's matmul fuzzer form: f16/bf16 operands widened to f32 by IDENTITY casts, an f32 output
        out["widen"] = True
        out["out_dt"] = "f32"
    return out


def _gen_norm(rng, big):
    op = _pick(rng, ["layernorm", "rmsnorm"])
    rows = int(rng.integers(1, (4096 if big else 64) + 1))
    cols = int(rng.integers(1, (4096 if big else 256) + 1))
    return {"op": op, "rows": rows, "cols": cols, "dt": _pick(rng, ["f32", "f16", "bf16"]),
            "eps": float(_pick(rng, [1e-5, 1e-6, 1e-3])), "bias": bool(rng.random() < 0.5)}


def _gen_sdpa(rng, big):
    b = int(rng.integers(1, 4 + 1))
    hq = int(rng.choice([1, 2, 4, 8]))
    hk = int(_pick(rng, [d for d in (1, 2, 4, 8) if hq % d == 0]))
    sq = int(rng.integers(1, (1024 if big else 64) + 1))
    skv = sq if rng.random() < 0.5 else int(rng.integers(1, (1024 if big else 64) + 1))
    d = int(rng.choice([16, 32, 64, 128] if big else [8, 16, 32, 64]))
    return {"b": b, "hq": hq, "hk": hk, "sq": sq, "skv": skv, "d": d,
            "dt": _pick(rng, ["f32", "f16", "bf16"], p=[0.2, 0.4, 0.4]),
            "causal": bool(rng.random() < 0.5 and sq <= skv)}


_GEN = {"conv": _gen_conv, "matmul": _gen_matmul, "norm": _gen_norm, "sdpa": _gen_sdpa}


# -- layouts and inputs ---------------------------------------------------------------------------
def _contig(dims):
    s, acc = [0] * len(dims), 1
    for i in reversed(range(len(dims))):
        s[i], acc = acc, acc * dims[i]
    return s


def _channels_last(dims):
    """Strides of ``[N, C, *S]`` stored as ``[N, *S, C]``."""
    perm = [0, *range(2, len(dims)), 1]
    phys = _contig([dims[p] for p in perm])
    s = [0] * len(dims)
    for i, p in enumerate(perm):
        s[p] = phys[i]
    return s


def _mat_strides(b, rows, cols, layout, rng_pad=3):
    if layout == "row":
        return [rows * cols, cols, 1]
    if layout == "col":
        return [rows * cols, 1, rows]
    ld = cols + rng_pad
    return [rows * ld, ld, 1]


def _array(rng, dims, strides, dtype_name, low=-1.0, high=1.0):
    """A random strided view in the given storage (its unused padding holds NaN: a read of padding shows)."""
    dt = numpy_dtype(_hd_dt(dtype_name))
    extent = 1 + sum((d - 1) * s for d, s in zip(dims, strides)) if all(dims) else 0
    store = np.full(max(extent, 1), np.nan, dtype=np.float32)
    view = np.lib.stride_tricks.as_strided(store, shape=tuple(dims), strides=tuple(s * 4 for s in strides))
    view[...] = rng.uniform(low, high, size=dims)
    return _strided(store.astype(dt), dims, strides)


def _out(dims, strides, dtype_name):
    dt = numpy_dtype(_hd_dt(dtype_name))
    extent = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    return _strided(np.full(extent, np.nan, dtype=np.float32).astype(dt), dims, strides)


def _strided(store, dims, strides):
    """A view of ``store`` with element ``strides`` (through bytes: as_strided cannot rebuild ml_dtypes' 1-byte types)."""
    dt = store.dtype
    raw = store.view(np.uint8) if dt.itemsize == 1 else store
    v = np.lib.stride_tricks.as_strided(raw, shape=tuple(dims), strides=tuple(s * dt.itemsize for s in strides))
    return v.view(dt) if dt.itemsize == 1 else v


def _hd_dt(name):
    return {"fp8_e4m3": hd.DataType.FP8_E4M3, "fp8_e5m2": hd.DataType.FP8_E5M2}.get(name) or DT[name]


def _f64(a):
    return np.asarray(a).astype(np.float64)


def _torch():
    import torch
    return torch


def _act64(name, t):
    torch = _torch()
    return {"relu": torch.relu, "gelu": lambda v: torch.nn.functional.gelu(v), "tanh": torch.tanh,
            "sigmoid": torch.sigmoid}[name](t)


# -- graphs and references --------------------------------------------------------------------------
def _epilogue(gr, y, ref, steps, bias_dims, dt, ins, rng):
    """The pointwise chain after a contraction: a bias (uid 3, broadcast over ``bias_dims``) then the
    activations, in the graph and on the float64 reference alike."""
    torch = _torch()
    if "bias" in steps:
        ba = _array(rng, bias_dims, _contig(bias_dims), dt)
        y = gr.pointwise(y, gr.tensor(name="bias", uid=3, dim=bias_dims), mode=hd.PointwiseMode.ADD)
        ins[3] = ba
        ref = ref + torch.from_numpy(_f64(ba))
    for e in steps:
        if e in ACTS:
            y = gr.pointwise(y, mode=ACTS[e])
            ref = _act64(e, ref)
    return y, ref


def build_conv(cs, rng):
    """(graph, inputs, outputs {uid: array}, reference {uid: float64 array}, reduction length)."""
    torch = _torch()
    n, c, k, g, sp, r = cs["n"], cs["c"], cs["k"], cs["g"], cs["spatial"], cs["r"]
    st, dil, pad, dt = cs["stride"], cs["dilation"], cs["padding"], cs["dt"]
    osp = [(sp[i] + 2 * pad[i] - dil[i] * (r[i] - 1) - 1) // st[i] + 1 for i in range(len(sp))]
    lay = _channels_last if cs["layout"] == "last" else _contig
    xd, wd, yd = [n, c, *sp], [k, c // g, *r], [n, k, *osp]
    gr = hd.Graph(name="fuzz_conv", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    kw = dict(padding=pad, stride=st, dilation=dil)
    fn = {1: "conv1d", 2: "conv2d", 3: "conv3d"}[len(sp)]
    tkw = dict(stride=st, padding=pad, dilation=dil, groups=g)
    if cs["op"] == "fprop":
        xa, wa = _array(rng, xd, lay(xd), dt), _array(rng, wd, lay(wd), dt)
        x = gr.tensor(name="x", uid=1, dim=xd, stride=lay(xd))
        w = gr.tensor(name="w", uid=2, dim=wd, stride=lay(wd))
        y = gr.conv_fprop(x, w, **kw)
        ins = {1: xa, 2: wa}
        ref = getattr(torch.nn.functional, fn)(torch.from_numpy(_f64(xa)), torch.from_numpy(_f64(wa)), **tkw)
        y, ref = _epilogue(gr, y, ref, cs["epilogue"], [1, k] + [1] * len(sp), dt, ins, rng)
        red = (c // g) * math.prod(r)
        outd, out_uid = yd, 9
    elif cs["op"] == "dgrad":
        dya, wa = _array(rng, yd, lay(yd), dt), _array(rng, wd, lay(wd), dt)
        dy = gr.tensor(name="dy", uid=1, dim=yd, stride=lay(yd))
        w = gr.tensor(name="w", uid=2, dim=wd, stride=lay(wd))
        y = gr.conv_dgrad(dy, w, **kw)
        y.set_dim(xd)
        ins = {1: dya, 2: wa}
        ref = getattr(torch.nn.grad, fn + "_input")(xd, torch.from_numpy(_f64(wa)), torch.from_numpy(_f64(dya)), **tkw)
        red = (k // g) * math.prod(r)
        outd, out_uid = xd, 9
    else:
        dya, xa = _array(rng, yd, lay(yd), dt), _array(rng, xd, lay(xd), dt)
        dy = gr.tensor(name="dy", uid=1, dim=yd, stride=lay(yd))
        x = gr.tensor(name="x", uid=2, dim=xd, stride=lay(xd))
        y = gr.conv_wgrad(dy, x, **kw)
        y.set_dim(wd)
        ins = {1: dya, 2: xa}
        ref = getattr(torch.nn.grad, fn + "_weight")(torch.from_numpy(_f64(xa)), wd, torch.from_numpy(_f64(dya)), **tkw)
        red = n * math.prod(osp)
        outd, out_uid = wd, 9
    y.set_output(True).set_uid(out_uid).set_stride(lay(outd))
    return gr, ins, {out_uid: _out(outd, lay(outd), dt)}, {out_uid: ref.numpy()}, {out_uid: (dt, red)}


def build_matmul(cs, rng):
    torch = _torch()
    m, n, k, b, dt = cs["m"], cs["n"], cs["k"], cs["b"], cs["dt"]
    ab = 1 if cs["bcast"] == "a" else b
    bb = 1 if cs["bcast"] == "b" else b
    in_dt = cs.get("fp8", dt)
    out_dt = cs.get("out_dt", dt)
    gr = hd.Graph(name="fuzz_matmul", io_data_type=DT[out_dt], compute_data_type=hd.DataType.FLOAT)
    sa, sb = _mat_strides(ab, m, k, cs["a_layout"]), _mat_strides(bb, k, n, cs["b_layout"])
    lo = -2.0 if dt == "fp8" else -1.0
    aa, ba_ = _array(rng, [ab, m, k], sa, in_dt, lo, -lo), _array(rng, [bb, k, n], sb, in_dt, lo, -lo)
    a = gr.tensor(name="a", uid=1, dim=[ab, m, k], stride=sa, data_type=_hd_dt(in_dt))
    bt = gr.tensor(name="b", uid=2, dim=[bb, k, n], stride=sb, data_type=_hd_dt(in_dt))
    if cs.get("widen"):
        a, bt = (gr.pointwise(v, mode=hd.PointwiseMode.IDENTITY, compute_data_type=hd.DataType.FLOAT)
                 .set_data_type(hd.DataType.FLOAT) for v in (a, bt))
    y = gr.matmul(a, bt)
    ins = {1: aa, 2: ba_}
    ref = torch.matmul(torch.from_numpy(_f64(aa)), torch.from_numpy(_f64(ba_)))
    y, ref = _epilogue(gr, y, ref, cs["epilogue"], [1, 1, n], out_dt, ins, rng)
    so = _mat_strides(b, m, n, cs["out_layout"])
    y.set_output(True).set_uid(9).set_stride(so)
    return gr, ins, {9: _out([b, m, n], so, out_dt)}, {9: ref.numpy()}, {9: (out_dt, k)}


def build_norm(cs, rng):
    rows, cols, dt = cs["rows"], cs["cols"], cs["dt"]
    gr = hd.Graph(name="fuzz_norm", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    xd, pd = [rows, cols, 1, 1], [1, cols, 1, 1]
    xa = _array(np.random.default_rng(rng.integers(1 << 30)), xd, _contig(xd), dt, -2.0, 3.0)
    sa, ba = _array(rng, pd, _contig(pd), dt), _array(rng, pd, _contig(pd), dt)
    x = gr.tensor(name="x", uid=1, dim=xd)
    s = gr.tensor(name="scale", uid=2, dim=pd)
    x64, s64, b64 = _f64(xa), _f64(sa), _f64(ba)
    ins = {1: xa, 2: sa}
    if cs["op"] == "layernorm":
        bt = gr.tensor(name="bias", uid=3, dim=pd)
        ins[3] = ba
        y = gr.layernorm(x, s, bt, epsilon=cs["eps"])
        mu = x64.mean(axis=1, keepdims=True)
        var = ((x64 - mu) ** 2).mean(axis=1, keepdims=True)
        ref = (x64 - mu) / np.sqrt(var + cs["eps"]) * s64 + b64
    else:
        bt = None
        if cs["bias"]:
            bt = gr.tensor(name="bias", uid=3, dim=pd)
            ins[3] = ba
        y = gr.rmsnorm(x, s, epsilon=cs["eps"], bias=bt)
        ref = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + cs["eps"]) * s64 + (b64 if bt is not None else 0)
    y = y[0] if isinstance(y, (list, tuple)) else y
    y.set_output(True).set_uid(9)
    return gr, ins, {9: _out(xd, _contig(xd), dt)}, {9: ref}, {9: (dt, 4)}


def build_sdpa(cs, rng):
    b, hq, hk, sq, skv, d, dt = cs["b"], cs["hq"], cs["hk"], cs["sq"], cs["skv"], cs["d"], cs["dt"]
    gr = hd.Graph(name="fuzz_sdpa", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    qd, kd = [b, hq, sq, d], [b, hk, skv, d]
    qa, ka, va = (_array(rng, x, _contig(x), dt) for x in (qd, kd, kd))
    q, kt, v = (gr.tensor(name=nm, uid=u, dim=x) for nm, u, x in (("q", 1, qd), ("k", 2, kd), ("v", 3, kd)))
    scale = 1.0 / math.sqrt(d)
    o = gr.sdpa(q, kt, v, attn_scale=scale, is_causal=cs["causal"])
    o = o[0] if isinstance(o, (list, tuple)) else o
    o.set_output(True).set_uid(9).set_dim(qd).set_stride(_contig(qd))
    q64, k64, v64 = _f64(qa), np.repeat(_f64(ka), hq // hk, axis=1), np.repeat(_f64(va), hq // hk, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q64, k64) * scale
    if cs["causal"]:
        s = np.where(np.tril(np.ones((sq, skv), bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    ref = np.einsum("bhqk,bhkd->bhqd", p, v64)
    return gr, {1: qa, 2: ka, 3: va}, {9: _out(qd, _contig(qd), dt)}, {9: ref}, {9: (dt, skv)}


_BUILD = {"conv": build_conv, "matmul": build_matmul, "norm": build_norm, "sdpa": build_sdpa}


def tolerance(dtype_name: str, reduction: int) -> float:
    """Allowed max |got - want| / max |want|: the output's rounding plus an f32 accumulation that grows with
    the square root of the reduction length (random signs), with headroom for the GPU's summation order."""
    return 4 * EPS[dtype_name] + 64 * 2.0 ** -24 * math.sqrt(max(reduction, 1)) + 1e-6


# -- running --------------------------------------------------------------------------------------
_TORCH_VIEW = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def to_torch(arr: np.ndarray, device: str):
    """``arr`` (a strided view, any element type) as a torch tensor on ``device`` with the same strides:
    its span (first to last element) copied as raw bytes, then viewed as torch's type of the same name."""
    import torch
    item = arr.dtype.itemsize
    span = 1 + sum((d - 1) * st // item for d, st in zip(arr.shape, arr.strides)) if arr.size else 1
    base = arr.view(np.uint8) if item == 1 else arr   # NOTE: as_strided cannot rebuild ml_dtypes' 1-byte types
    flat = np.ascontiguousarray(np.lib.stride_tricks.as_strided(base, shape=(span,), strides=(item,)))
    raw = torch.from_numpy(flat.view(_TORCH_VIEW[item])).to(device)
    t = raw.view(getattr(torch, arr.dtype.name if arr.dtype.name != "float8_e4m3fn" else "float8_e4m3fn"))
    return torch.as_strided(t, tuple(arr.shape), tuple(st // item for st in arr.strides))


def from_torch(t, like: np.ndarray) -> np.ndarray:
    """A device tensor made by :func:`to_torch` back in ``like``'s numpy type (logical values only)."""
    import torch
    dense = t.contiguous().cpu()
    item = like.dtype.itemsize
    return dense.view(getattr(torch, _TORCH_VIEW[item])).numpy().view(like.dtype)


KNOBS: dict = {}   # IREE engine knobs every case is built with (--knob); empty: the default engine and AUTO


def run_case(cs: dict, handle, build_handle=None, torch_device: str | None = None) -> dict:
    """Builds, runs and checks one case; returns {"status": right|WRONG|refused|error, ...}.
    ``torch_device``: bind inputs and outputs as torch tensors there (a GPU handle takes device tensors)."""
    rng = np.random.default_rng(cs["seed"] + 1)
    t0 = time.perf_counter()
    try:
        g, ins, outs, refs, meta = _BUILD[cs["kind"]](cs, rng)
    except hd.HipdnnError as e:
        return {"status": "refused", "why": f"{e.status.name}: {str(e)[:300]}", "stage": "graph"}
    try:
        if KNOBS:
            g.validate().build_operation_graph(build_handle or handle)
            g.create_execution_plan("IREE_LINALG", dict(KNOBS))
            g.check_support().build_plans()
        else:
            g.build(build_handle or handle)
    except hd.HipdnnError as e:
        # NOTE: INTERNAL_ERROR is the engine failing on a valid graph (e.g. IREE's compile failing), a defect;
        # the other statuses are refusals (NOT_SUPPORTED and friends, each with its reason)
        bad = e.status == hd.Status.INTERNAL_ERROR
        return {"status": "error" if bad else "refused", "why": f"{e.status.name}: {str(e)[:300]}", "stage": "build"}
    t_build = time.perf_counter() - t0
    before = {u: np.array(a, copy=True) for u, a in ins.items()}
    t1 = time.perf_counter()
    try:
        if torch_device:
            dev = {u: to_torch(a, torch_device) for u, a in {**ins, **outs}.items()}
            g.execute(handle, dev)
            ins_after = {u: from_torch(dev[u], a) for u, a in ins.items()}
            outs = {u: from_torch(dev[u], a) for u, a in outs.items()}
        else:
            g.execute(handle, {**ins, **outs})
            ins_after = ins
    except hd.HipdnnError as e:
        return {"status": "error", "why": f"execute: {e.status.name}: {str(e)[:300]}", "build_s": t_build}
    res = {"status": "right", "build_s": t_build, "first_execute_s": time.perf_counter() - t1, "err": 0.0}
    for u, a in ins_after.items():
        if not np.array_equal(np.asarray(a, np.float32), np.asarray(before[u], np.float32), equal_nan=True):
            res.update(status="WRONG", why=f"input uid {u} was changed by execute")
    for u, want in refs.items():
        dtn, red = meta[u]
        got = _f64(outs[u])
        scale = max(float(np.abs(want).max()) if want.size else 0.0, 1e-6)
        if want.size and not np.isfinite(got).all():
            err = float("inf")
        else:
            err = float(np.abs(got - want).max() / scale) if want.size else 0.0
        tol = tolerance(dtn, red)
        res["err"], res["tol"] = max(res["err"], err), tol
        if not err <= tol:
            bad = float(np.mean(~(np.abs(got - want) <= tol * scale)))
            res.update(status="WRONG", bad_fraction=round(bad, 4))
    return res


def repro_line(cs: dict, target: str, device: str | None) -> str:
    dev = f" --device {device}" if device else ""
    dev += "".join(f" --knob {k}={v}" for k, v in sorted(KNOBS.items()))
    return f"python tests/fuzz_ops.py --target {target}{dev} --case '{json.dumps(cs, separators=(',', ':'))}'"


def describe(cs: dict) -> str:
    if cs["kind"] == "conv":
        return (f"conv {cs['op']} N{cs['n']} {cs['c']}->{cs['k']} g{cs['g']} {'x'.join(map(str, cs['spatial']))} "
                f"r{'x'.join(map(str, cs['r']))} s{cs['stride']} d{cs['dilation']} p{cs['padding']} {cs['dt']} "
                f"{cs['layout']} {'+'.join(cs['epilogue'])}")
    if cs["kind"] == "matmul":
        return (f"matmul b{cs['b']}({cs['bcast']}) {cs['m']}x{cs['n']}x{cs['k']} {cs.get('fp8', cs['dt'])}"
                f"{' widened' if cs.get('widen') else ''}"
                f"->{cs.get('out_dt', cs['dt'])} a:{cs['a_layout']} b:{cs['b_layout']} y:{cs['out_layout']} "
                f"{'+'.join(cs['epilogue'])}")
    if cs["kind"] == "norm":
        return f"{cs['op']} {cs['rows']}x{cs['cols']} {cs['dt']} eps{cs['eps']} bias{cs['bias']}"
    return (f"sdpa b{cs['b']} h{cs['hq']}/{cs['hk']} s{cs['sq']}x{cs['skv']} d{cs['d']} {cs['dt']} "
            f"causal{cs['causal']}")


class _CompileClock:
    """Seconds spent in ``iree-compile`` (the engine's compile_mlir), to split build time into compile and the rest."""

    def __init__(self):
        from hipdnn_iree.plugins.iree_linalg import compile as _compile
        self.mod, self.real, self.total = _compile, _compile.compile_mlir, 0.0

    def __enter__(self):
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return self.real(*a, **k)
            finally:
                self.total += time.perf_counter() - t
        self.mod.compile_mlir = timed
        return self

    def __exit__(self, *exc):
        self.mod.compile_mlir = self.real


def run(cases, handle, target, device=None, log=print, build_handle=None, deadline_s=None, torch_device=None) -> dict:
    """Runs ``cases`` (stopping early, counted as ``not_run``, once ``deadline_s`` seconds have passed)."""
    counts, wrong, refused, build_s = collections.Counter(), [], collections.Counter(), []
    compile_s, exec_s, refused_cases = [], [], []
    t_start = time.perf_counter()
    for i, cs in enumerate(cases):
        if deadline_s is not None and time.perf_counter() - t_start > deadline_s:
            counts["not_run"] += len(cases) - i
            break
        try:
            with _CompileClock() as clock:
                r = run_case(cs, handle, build_handle, torch_device)
            if "first_execute_s" in r:
                compile_s.append(clock.total)
                exec_s.append(r["first_execute_s"])
        except Exception as e:   # a raw exception from inside is itself a defect: count it, keep going
            r = {"status": "error", "why": f"{type(e).__name__}: {e}"[:300], "trace": traceback.format_exc()[-800:]}
        counts[r["status"]] += 1
        if "build_s" in r:
            build_s.append(r["build_s"])
        if r["status"] == "refused":
            refused[r["why"][:120]] += 1
            if len(refused_cases) < 50:
                refused_cases.append({"case": cs, "what": describe(cs), "why": r["why"]})
        if r["status"] in ("WRONG", "error"):
            wrong.append({"case": cs, "what": describe(cs), **{k: v for k, v in r.items() if k != "trace"}})
            log(f"{r['status']}: {describe(cs)} err={r.get('err')} tol={r.get('tol')} {r.get('why', '')}\n"
                f"  repro: {repro_line(cs, target, device)}")
    return {"counts": dict(counts), "wrong": wrong, "refused": dict(refused.most_common()),
            "refused_cases": refused_cases,
            "median_build_s": float(np.median(build_s)) if build_s else None,
            "median_compile_s": float(np.median(compile_s)) if compile_s else None,
            "median_first_execute_s": float(np.median(exec_s)) if exec_s else None, "cases": len(cases),
            "build_s": [round(v, 4) for v in build_s], "compile_s": [round(v, 4) for v in compile_s],
            "first_execute_s": [round(v, 4) for v in exec_s]}


def merge(paths) -> dict:
    """One summary of several shard results (counts added, wrong cases and refusals listed, medians over
    every case's build time): what is committed (docs/gpu_results), not the per-case samples."""
    counts, refused, wrong, build, comp, first, wall = collections.Counter(), collections.Counter(), [], [], [], [], []
    refused_cases = []
    meta = {}
    for p in paths:
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError):
            counts["shard_missing"] += 1   # a shard killed by its time limit wrote nothing
            continue
        counts.update(d["counts"])
        refused.update(d["refused"])
        wrong += d["wrong"]
        refused_cases += d.get("refused_cases", [])[:20]
        build += d.get("build_s", [])
        comp += d.get("compile_s", [])
        first += d.get("first_execute_s", [])
        wall.append(d.get("wall_s", 0))
        meta = {k: d.get(k) for k in ("target", "device", "size")}
    med = lambda v: round(float(np.median(v)), 4) if v else None  # noqa: E731
    return {**meta, "shards": len(paths), "counts": dict(counts), "refused": dict(refused.most_common()),
            "wrong": wrong, "refused_cases": refused_cases[:100], "median_build_s": med(build), "median_compile_s": med(comp),
            "median_first_execute_s": med(first), "built": len(build), "max_shard_wall_s": max(wall or [0])}


def summary_md(s: dict) -> str:
    c = s["counts"]
    lines = [f"fuzz {s.get('target')} ({s.get('size')}): {sum(v for k, v in c.items() if k != 'shard_missing')} cases, "
             f"right {c.get('right', 0)}, not run (time) {c.get('not_run', 0)}, WRONG {c.get('WRONG', 0)}, error {c.get('error', 0)}, "
             f"refused {c.get('refused', 0)}; median build {s['median_build_s']} s (compile {s['median_compile_s']} s), "
             f"first execute {s['median_first_execute_s']} s", "", "| status | case | err / tol |", "|---|---|---|"]
    for w in s["wrong"]:
        lines.append(f"| {w['status']} | {w['what']} | {w.get('err')} / {w.get('tol')} {w.get('why', '')[:200]} |")
    lines += ["", "| refused (count) | why |", "|---|---|"] + [f"| {n} | {why} |" for why, n in s["refused"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--size", default="small", choices=["small", "large"])
    ap.add_argument("--target", default="llvm-cpu:host")
    ap.add_argument("--device", default=None, help="IREE device (default: local-task for CPU targets)")
    ap.add_argument("--torch-device", default=None, help="bind tensors as torch tensors on this device "
                    "(default: cuda for a cuda device, none for the CPU)")
    ap.add_argument("--deadline-s", type=float, default=None, help="start no case after this many seconds")
    ap.add_argument("--case", default=None, help="one case's JSON (a reproduction line)")
    ap.add_argument("--knob", action="append", default=[], help="NAME=VALUE: build every case on the IREE engine "
                    "with this knob (e.g. GPU_KERNELS=GENERATED)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--merge", nargs="+", default=None, help="shard JSON files to merge into one summary")
    ap.add_argument("--md", default=None, help="with --merge: the summary as markdown")
    a = ap.parse_args(argv)
    if a.merge:
        s = merge(a.merge)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(s, f, indent=1, default=str)
        if a.md:
            with open(a.md, "w") as f:
                f.write(summary_md(s))
        return 0 if not s["counts"].get("WRONG") and not s["counts"].get("error") else 1
    KNOBS.update(kv.split("=", 1) for kv in a.knob)
    device = a.device or ("local-task" if a.target.startswith("llvm-cpu") else None)
    handle = hd.create_handle(device=device, target=a.target)
    if a.case:
        cases = [json.loads(a.case)]
    else:
        kinds = a.kinds.split(",")
        cases = [gen_case(a.seed * 1_000_003 + i, kinds[i % len(kinds)] if len(kinds) < len(KINDS) else
                          (None if len(kinds) == len(KINDS) else kinds[0]), a.size) for i in range(a.cases)]
    t0 = time.perf_counter()
    # NOTE: a GPU handle takes device tensors (host arrays are refused): torch on that device
    tdev = None if (device or "").startswith("local") else ("cuda" if (device or "").startswith("cuda") else device)
    tdev = a.torch_device or tdev
    out = run(cases, handle, a.target, a.device, deadline_s=a.deadline_s, torch_device=tdev)
    out.update(target=a.target, device=device, seed=a.seed, size=a.size, wall_s=round(time.perf_counter() - t0, 1),
               knobs=dict(KNOBS))
    summary = {k: out[k] for k in ("counts", "median_build_s", "median_compile_s", "median_first_execute_s",
                                   "cases", "wall_s")}
    print(json.dumps(summary))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0 if not out["counts"].get("WRONG") and not out["counts"].get("error") else 1


if __name__ == "__main__":
    sys.exit(main())
