"""Benchmark graphs with their inputs, FLOP counts and numpy / PyTorch baselines.

Each case builds a fresh :class:`hd.Graph`, makes inputs laid out as the graph declares
them (strided views over dense memory images) and computes the same result with numpy
and, when ``import torch`` works, PyTorch on the CPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import hipdnn_iree as hd

SIZES = {
    # name: (matmul m=n=k, conv (N, C, H, W, K), chain (m, k, n))
    "full": (1024, (8, 64, 56, 56, 64), (1024, 1024, 1024)),
    "tiny": (32, (1, 4, 6, 6, 4), (8, 16, 12)),
}


@dataclass
class Case:
    """One benchmark graph. ``flops`` is None where GFLOP/s means nothing (the overhead probe)."""

    name: str
    shape: str
    build: Callable[[], hd.Graph]
    inputs: dict            # uid -> (logical array in the declared layout, dense memory image)
    outputs: dict           # uid -> (dims, strides)
    flops: float | None
    numpy_fn: Callable[[], np.ndarray] | None     # None: numpy has no such op (then ``reference`` checks)
    torch_fn: Callable[[], object] | None = None
    reference: Callable[[], np.ndarray] | None = None   # float64 result for the error column; default numpy_fn


def strided(dense: np.ndarray, dims, strides) -> np.ndarray:
    """A view of ``dense`` (the memory image) with logical ``dims`` and element ``strides``."""
    return np.lib.stride_tricks.as_strided(dense, shape=tuple(dims), strides=tuple(s * dense.itemsize for s in strides))


def _torch():
    try:
        import torch
        return torch
    except Exception:  # NOTE: any import failure (missing, broken install) means "no PyTorch column"
        return None


def tiny_matmul() -> Case:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 5), np.float32)

    def build():
        g = hd.Graph(name="tiny_matmul", io_data_type=hd.DataType.FLOAT)
        g.matmul(g.tensor(name="A", uid=1, dim=[4, 8]), g.tensor(name="B", uid=2, dim=[8, 5])).set_output(True).set_uid(3)
        return g
    return Case("tiny matmul (overhead probe)", "4x8 @ 8x5 f32", build, {1: (a, a), 2: (b, b)},
                {3: ([4, 5], [5, 1])}, None, lambda: a @ b)


def matmul(n: int) -> Case:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    torch = _torch()

    def build():
        g = hd.Graph(name="matmul", io_data_type=hd.DataType.FLOAT)
        g.matmul(g.tensor(name="A", uid=1, dim=[n, n]), g.tensor(name="B", uid=2, dim=[n, n])).set_output(True).set_uid(3)
        return g
    ta, tb = (torch.from_numpy(a), torch.from_numpy(b)) if torch else (None, None)
    return Case("matmul", f"{n}x{n} @ {n}x{n} f32", build, {1: (a, a), 2: (b, b)}, {3: ([n, n], [n, 1])},
                2.0 * n ** 3, lambda: a @ b, (lambda: torch.mm(ta, tb)) if torch else None)


def conv(shape) -> Case:
    """NHWC (channels-last via strides) 3x3 convolution, padding 1, stride 1, f32."""
    n, c, h, w, k = shape
    rng = np.random.default_rng(2)
    x_nhwc = rng.standard_normal((n, h, w, c), np.float32)
    w_krsc = (rng.standard_normal((k, 3, 3, c)) / math.sqrt(9 * c)).astype(np.float32)
    x_strides, w_strides, y_strides = [h * w * c, 1, w * c, c], [9 * c, 1, 3 * c, c], [h * w * k, 1, w * k, k]
    x_log, w_log = strided(x_nhwc, [n, c, h, w], x_strides), strided(w_krsc, [k, c, 3, 3], w_strides)
    torch = _torch()

    def build():
        if not hasattr(hd.Graph, "conv_fprop"):
            raise hd.HipdnnError(hd.Status.NOT_SUPPORTED, "this hipdnn-iree has no Graph.conv_fprop")
        g = hd.Graph(name="conv", io_data_type=hd.DataType.FLOAT)
        xt = g.tensor(name="X", uid=1, dim=[n, c, h, w], stride=x_strides)
        wt = g.tensor(name="W", uid=2, dim=[k, c, 3, 3], stride=w_strides)
        g.conv_fprop(xt, wt, padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_output(True).set_uid(3) \
            .set_stride(y_strides)
        return g

    def numpy_fn():
        xp = np.pad(x_nhwc, ((0, 0), (1, 1), (1, 1), (0, 0)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(1, 2))    # N, H, W, C, R, S
        y = np.tensordot(win, w_krsc, axes=([3, 4, 5], [3, 1, 2]))                # N, H, W, K (im2col + GEMM)
        return y.transpose(0, 3, 1, 2)

    if torch:
        tx, tw = torch.from_numpy(x_log), torch.from_numpy(w_log)   # channels-last strides, no copy
        torch_fn = lambda: torch.nn.functional.conv2d(tx, tw, padding=1)  # noqa: E731
    return Case("conv 3x3 NHWC", f"N{n} C{c} {h}x{w} -> K{k}, pad 1, f32", build,
                {1: (x_log, x_nhwc), 2: (w_log, w_krsc)}, {3: ([n, k, h, w], y_strides)},
                2.0 * n * k * c * 9 * h * w, numpy_fn, torch_fn if torch else None)


def _layout_strides(dims, layout: str) -> list[int]:
    """Element strides of logical ``[N, C, *S]`` dims stored in ``layout`` ("cf" or "cl")."""
    r = len(dims) - 2
    order = [0, 1, *range(2, 2 + r)] if layout == "cf" else [0, *range(2, 2 + r), 1]
    strides, acc = [0] * len(dims), 1
    for a in reversed(order):
        strides[a] = acc
        acc *= dims[a]
    return strides


def _dense_in(rng, dims, layout, scale=1.0):
    """(logical view, dense memory image) of random data stored in ``layout``."""
    from graph_ir.layout import physical_layout   # the module's argument shape (size-1 axes placed as it does)
    st = _layout_strides(dims, layout)
    dense = (rng.standard_normal(physical_layout(dims, st).phys_shape) * scale).astype(np.float32)
    return strided(dense, dims, st), dense


def conv_case(name: str, x_dims, w_dims, pad, stride, dilation=None, x_layout="cl", w_layout="cl",
              seed: int = 2) -> Case:
    """One conv_fprop (any rank, groups from the dims) with activations and filter stored
    channels-first ("cf": NCHW / KCRS) or channels-last ("cl": NHWC / KRSC); the output follows x.
    numpy: im2col (``sliding_window_view``) + ``tensordot`` (ungrouped only); torch: conv{1,2,3}d on
    the same strided memory (channels_last views, no copies)."""
    rank = len(x_dims) - 2
    dilation = dilation or [1] * rank
    rng = np.random.default_rng(seed)
    groups = x_dims[1] // w_dims[1]
    x_log, x_img = _dense_in(rng, x_dims, x_layout)
    w_log, w_img = _dense_in(rng, w_dims, w_layout, 1.0 / math.sqrt(w_dims[1] * math.prod(w_dims[2:])))
    out_sp = [(i + 2 * p - d * (k - 1) - 1) // s + 1
              for i, k, p, s, d in zip(x_dims[2:], w_dims[2:], pad, stride, dilation)]
    y_dims = [x_dims[0], w_dims[0], *out_sp]
    y_strides = _layout_strides(y_dims, x_layout)
    torch = _torch()

    def build():
        g = hd.Graph(name=name.replace(" ", "_"), io_data_type=hd.DataType.FLOAT)
        xt = g.tensor(name="X", uid=1, dim=list(x_dims), stride=_layout_strides(x_dims, x_layout))
        wt = g.tensor(name="W", uid=2, dim=list(w_dims), stride=_layout_strides(w_dims, w_layout))
        g.conv_fprop(xt, wt, padding=list(pad), stride=list(stride), dilation=list(dilation)) \
            .set_output(True).set_uid(3).set_stride(y_strides)
        return g

    def numpy_fn():
        xl = np.moveaxis(np.asarray(x_log), 1, -1)                                 # N, *S, C
        xp = np.pad(xl, [(0, 0)] + [(p, p) for p in pad] + [(0, 0)])
        ext = [d * (k - 1) + 1 for k, d in zip(w_dims[2:], dilation)]
        win = np.lib.stride_tricks.sliding_window_view(xp, ext, axis=tuple(range(1, 1 + rank)))
        win = win[(slice(None),) + tuple(slice(None, None, s) for s in stride) + (slice(None),)
                  + tuple(slice(None, None, d) for d in dilation)]                 # N, *O, C, *R
        y = np.tensordot(win, np.asarray(w_log), axes=(list(range(1 + rank, 2 + 2 * rank)),
                                                        list(range(1, 2 + rank))))  # N, *O, K
        return np.moveaxis(y, -1, 1)

    def reference():
        t = torch if torch else None
        if t is None:
            return numpy_fn()
        f = getattr(t.nn.functional, f"conv{rank}d")
        return f(t.from_numpy(np.ascontiguousarray(x_log)).double(), t.from_numpy(np.ascontiguousarray(w_log)).double(),
                 stride=list(stride), padding=list(pad), dilation=list(dilation), groups=groups).numpy()

    torch_fn = None
    if torch:
        tx, tw = torch.from_numpy(x_log), torch.from_numpy(w_log)   # the same strided memory, no copy
        f = getattr(torch.nn.functional, f"conv{rank}d")
        torch_fn = lambda: f(tx, tw, stride=list(stride), padding=list(pad), dilation=list(dilation),  # noqa: E731
                             groups=groups)
    lay = {"cf": "channels-first", "cl": "channels-last"}
    shape = (f"x {list(x_dims)} {lay[x_layout]}, w {list(w_dims)} {lay[w_layout]}, pad {list(pad)}, "
             f"stride {list(stride)}" + (f", dilation {list(dilation)}" if any(d > 1 for d in dilation) else "")
             + (f", groups {groups}" if groups > 1 else "") + ", f32")
    flops = 2.0 * math.prod(y_dims) * w_dims[1] * math.prod(w_dims[2:])
    return Case(name, shape, build, {1: (x_log, x_img), 2: (w_log, w_img)}, {3: (y_dims, y_strides)}, flops,
                numpy_fn if groups == 1 else None, torch_fn, reference)


def _gelu_tanh(v):
    return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v * v * v)))


def chain(shape) -> Case:
    """matmul + bias + GELU (tanh approximation, so numpy can compute it without erf)."""
    m, k, n = shape
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, k), np.float32)
    w = (rng.standard_normal((k, n)) / math.sqrt(k)).astype(np.float32)
    b = rng.standard_normal((1, n), np.float32)
    torch = _torch()

    def build():
        g = hd.Graph(name="matmul_bias_gelu", io_data_type=hd.DataType.FLOAT)
        xt, wt = g.tensor(name="X", uid=1, dim=[m, k]), g.tensor(name="W", uid=2, dim=[k, n])
        bt = g.tensor(name="bias", uid=3, dim=[1, n])
        y = g.pointwise(g.matmul(xt, wt), bt, mode=hd.PointwiseMode.ADD)
        g.pointwise(y, mode=hd.PointwiseMode.GELU_APPROX_TANH_FWD).set_output(True).set_uid(4)
        return g
    if torch:
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        torch_fn = lambda: torch.nn.functional.gelu(torch.addmm(tb, tx, tw), approximate="tanh")  # noqa: E731
    return Case("matmul+bias+gelu", f"{m}x{k} @ {k}x{n} + bias, gelu(tanh) f32", build,
                {1: (x, x), 2: (w, w), 3: (b, b)}, {4: ([m, n], [n, 1])}, 2.0 * m * n * k,
                lambda: _gelu_tanh(x @ w + b), torch_fn if torch else None)


def batch_matmul(b: int, m: int, k: int, n: int) -> Case:
    rng = np.random.default_rng(4)
    a, w = rng.standard_normal((b, m, k), np.float32), rng.standard_normal((b, k, n), np.float32)
    torch = _torch()

    def build():
        g = hd.Graph(name="batch_matmul", io_data_type=hd.DataType.FLOAT)
        g.matmul(g.tensor(name="A", uid=1, dim=[b, m, k]), g.tensor(name="B", uid=2, dim=[b, k, n])) \
            .set_output(True).set_uid(3)
        return g
    ta, tw = (torch.from_numpy(a), torch.from_numpy(w)) if torch else (None, None)
    return Case("batched matmul", f"{b}x{m}x{k} @ {b}x{k}x{n} f32", build, {1: (a, a), 2: (w, w)},
                {3: ([b, m, n], [m * n, n, 1])}, 2.0 * b * m * n * k, lambda: a @ w,
                (lambda: torch.bmm(ta, tw)) if torch else None)


def model_block(name: str, label: str, shape: str) -> Case:
    """A block of benchmarks/gpu_blocks.py (built from the public API) in f32 on the CPU; PyTorch runs
    the block's own forward; the error column compares with that forward in float64 (numpy has no sdpa)."""
    import gpu_blocks
    g0, forward = getattr(gpu_blocks, name)("f32")
    torch = _torch()
    h = hd.create_handle(device=None, target="llvm-cpu", cache=False)
    g0.build_operation_graph(h)
    from graph_ir import decode_graph
    desc = decode_graph(g0.get_op_graph_bytes())
    rng = np.random.default_rng(5)
    inputs, outputs = {}, {}
    for t in desc.bound_tensors():
        dims, strides = list(t.dims), list(t.strides)
        if t.uid in desc.output_uids():
            outputs[t.uid] = (dims, strides)
            continue
        order = sorted(range(len(dims)), key=lambda a: -strides[a])
        fan = gpu_blocks._fan_in(type("T", (), {"name": t.name, "dims": dims})())
        scale = 1.0 / math.sqrt(fan) if fan else (0.1 if not t.name.endswith(("scale", "inv_var")) else 1.0)
        dense = (rng.standard_normal([dims[a] for a in order]) * scale).astype(np.float32)
        if t.name.endswith("inv_var"):
            dense = np.abs(dense) * 0.5 + 0.5
        inputs[t.uid] = (strided(dense, dims, strides), dense)

    def torch_inputs(dtype):
        return {u: torch.from_numpy(np.asarray(v)).to(dtype) if dtype != torch.float32 else torch.from_numpy(v)
                for u, (v, _) in inputs.items()}
    tin = torch_inputs(torch.float32) if torch else None
    (out_uid,) = outputs

    def reference():
        return forward(torch, torch_inputs(torch.float64))[out_uid].numpy()
    return Case(label, shape, lambda: getattr(gpu_blocks, name)("f32")[0], inputs, outputs, None, None,
                (lambda: forward(torch, tin)) if torch else None, reference)


def all_cases(sizes: str = "full") -> list[Case]:
    if sizes == "tiny":
        mm, cv, ch = SIZES[sizes]
        return [tiny_matmul(), matmul(mm), conv(cv), chain(ch),
                conv_case("conv 1-D", [1, 8, 20], [8, 8, 3], [1], [2], x_layout="cf", w_layout="cf")]
    C = conv_case
    return [
        tiny_matmul(),
        C("ResNet-50 stem 7x7/2", [8, 3, 224, 224], [64, 3, 7, 7], [3, 3], [2, 2]),
        C("ResNet-50 3x3", [8, 64, 56, 56], [64, 64, 3, 3], [1, 1], [1, 1]),
        C("ResNet-50 3x3 NCHW/KCRS", [8, 64, 56, 56], [64, 64, 3, 3], [1, 1], [1, 1], x_layout="cf", w_layout="cf"),
        C("ResNet-50 1x1", [8, 256, 56, 56], [64, 256, 1, 1], [0, 0], [1, 1]),
        C("ResNet-50 projection 1x1/2", [8, 256, 56, 56], [512, 256, 1, 1], [0, 0], [2, 2]),
        C("depthwise 3x3", [8, 128, 56, 56], [128, 1, 3, 3], [1, 1], [1, 1]),
        C("conv 1-D k3/2", [1, 512, 400], [512, 512, 3], [1], [2], x_layout="cf", w_layout="cf"),
        C("conv 3-D 3x3x3", [2, 32, 8, 28, 28], [64, 32, 3, 3, 3], [1, 1, 1], [1, 1, 1]),
        matmul(1024),
        batch_matmul(12, 256, 64, 256),
        chain((1024, 1024, 1024)),
        model_block("bert_attention", "BERT-base attention", "x [2,128,768], 12 heads: Q/K/V projections, sdpa"),
        model_block("bert_output_ffn", "BERT-base output+FFN", "256 tokens: Wo, residual, LN, 768->3072 GELU ->768, LN"),
        model_block("llama_gqa_attention", "Llama attention (GQA)", "256 tokens, E 1024: rmsnorm, 16q/4kv heads, causal sdpa"),
        model_block("llama_swiglu_mlp", "Llama SwiGLU MLP", "256 tokens: rmsnorm, 1024->2816 SwiGLU ->1024, residual"),
    ]
