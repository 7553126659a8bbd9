"""CPU plans against PyTorch (and numpy's BLAS) on the same machine, same threads (issue 47).

The rows of issue 47's table, plus bf16 matmul and conv against torch's bf16: each graph is built
through the public API for ``llvm-cpu:host``, then its steady ``execute`` is timed in interleaved
rounds with torch's equivalent (and numpy for the matmul), medians reported. Every row is checked
against a float64 reference first (a wrong fast plan is no result).

    python benchmarks/cpu_vs_torch.py [--only NAME[,NAME]] [--knob NAME=VALUE ...] [--json PATH]

``--knob`` builds every graph with those knob values (IREE engine knobs, docs/api.md 3.9) instead of
AUTO; run it with ``HIPDNN_IREE_CACHE=0`` so each variant compiles afresh. Run with OPENBLAS_CORETYPE
and OPENBLAS_L2_SIZE unset (some machines set them and slow numpy): the report names numpy's BLAS and
the CPU's model and vector features.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import hipdnn_iree as hd  # noqa: E402

F, BF = hd.DataType.FLOAT, hd.DataType.BFLOAT16
P = hd.PointwiseMode


def _tensor(g, name, uid, dims, strides=None, dt=None):
    kw = {"name": name, "uid": uid, "dim": list(dims)}
    if strides is not None:
        kw["stride"] = list(strides)
    if dt is not None:
        kw["data_type"] = dt
    return g.tensor(**kw)


def _cl_strides(dims):
    """Channels-last strides of logical [N, C, *spatial] dims."""
    n, c, sp = dims[0], dims[1], list(dims[2:])
    st = [0] * len(dims)
    st[1] = 1
    acc = c
    for i in range(len(sp) - 1, -1, -1):
        st[2 + i] = acc
        acc *= sp[i]
    st[0] = acc
    return st


class Row:
    """One graph: ``build() -> hd.Graph``; inputs as logical numpy arrays (views over dense images);
    ``torch_fn``; ``reference()`` float64; ``flops``."""

    def __init__(self, name, shape, build, inputs, out, torch_fn, reference, flops, numpy_fn=None, tol=2e-3):
        self.name, self.shape, self.build, self.inputs, self.out = name, shape, build, inputs, out
        self.torch_fn, self.reference, self.flops, self.numpy_fn, self.tol = torch_fn, reference, flops, numpy_fn, tol


def _strided_view(dense, dims, strides):
    return np.lib.stride_tricks.as_strided(dense, shape=tuple(dims), strides=tuple(s * dense.itemsize for s in strides))


def _np_dtype(bf16):
    if bf16:
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.float32


def rows(torch) -> list[Row]:
    rng = np.random.default_rng(47)
    out = []

    # matmul 1024^3 f32 (numpy too), and bf16
    for bf16 in (False, True):
        n = 1024
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = (rng.standard_normal((n, n)) / math.sqrt(n)).astype(np.float32)
        ndt = _np_dtype(bf16)
        a_, b_ = a.astype(ndt), b.astype(ndt)
        dt = BF if bf16 else F

        def build(dt=dt, n=n):
            g = hd.Graph(name="matmul", io_data_type=dt, compute_data_type=F)
            g.matmul(_tensor(g, "A", 1, [n, n]), _tensor(g, "B", 2, [n, n])).set_output(True).set_uid(3)
            return g
        tdt = torch.bfloat16 if bf16 else torch.float32
        ta, tb = torch.from_numpy(a).to(tdt), torch.from_numpy(b).to(tdt)
        out.append(Row(f"matmul {'bf16' if bf16 else 'f32'}", f"{n}x{n} @ {n}x{n}", build, {1: a_, 2: b_},
                       (3, [n, n], [n, 1], ndt), lambda ta=ta, tb=tb: torch.mm(ta, tb),
                       lambda a_=a_, b_=b_: a_.astype(np.float64) @ b_.astype(np.float64), 2.0 * n ** 3,
                       numpy_fn=(None if bf16 else (lambda a=a, b=b: a @ b)), tol=2e-2 if bf16 else 1e-4))

    # MLP layer: matmul + bias + GELU (tanh) f32, 512 tokens, 1024 -> 4096
    m, k, nn = 512, 1024, 4096
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((k, nn)) / math.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal((1, nn)).astype(np.float32)

    def build_mlp():
        g = hd.Graph(name="mlp", io_data_type=F, compute_data_type=F)
        y = g.pointwise(g.matmul(_tensor(g, "X", 1, [m, k]), _tensor(g, "W", 2, [k, nn])), _tensor(g, "b", 3, [1, nn]),
                        mode=P.ADD)
        g.pointwise(y, mode=P.GELU_APPROX_TANH_FWD).set_output(True).set_uid(4)
        return g
    tx, tw, tbias = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias)

    def gelu64():
        v = x.astype(np.float64) @ w.astype(np.float64) + bias
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    out.append(Row("MLP layer f32", f"{m}x{k} @ {k}x{nn} + bias, gelu(tanh)", build_mlp, {1: x, 2: w, 3: bias},
                   (4, [m, nn], [nn, 1], np.float32),
                   lambda: torch.nn.functional.gelu(torch.addmm(tbias, tx, tw), approximate="tanh"), gelu64,
                   2.0 * m * k * nn, tol=1e-4))

    # conv 3x3 NHWC f32 and bf16: N 8, 64 -> 64, 56x56, pad 1
    for bf16 in (False, True):
        xd, wd = [8, 64, 56, 56], [64, 64, 3, 3]
        xs, ws = _cl_strides(xd), _cl_strides(wd)
        ndt = _np_dtype(bf16)
        xdense = rng.standard_normal((8, 56, 56, 64)).astype(np.float32)
        wdense = (rng.standard_normal((64, 3, 3, 64)) / math.sqrt(64 * 9)).astype(np.float32)
        xv = _strided_view(xdense.astype(ndt), xd, xs)
        wv = _strided_view(wdense.astype(ndt), wd, ws)
        dt = BF if bf16 else F
        yd = [8, 64, 56, 56]

        def build_conv(dt=dt, xd=xd, xs=xs, wd=wd, ws=ws, yd=yd):
            g = hd.Graph(name="conv3x3", io_data_type=dt, compute_data_type=F)
            y = g.conv_fprop(_tensor(g, "x", 1, xd, xs), _tensor(g, "w", 2, wd, ws), padding=[1, 1], stride=[1, 1],
                             dilation=[1, 1])
            y.set_output(True).set_uid(3).set_dim(yd).set_stride(_cl_strides(yd))
            return g
        tdt = torch.bfloat16 if bf16 else torch.float32
        txc = torch.from_numpy(np.ascontiguousarray(xv.astype(np.float32))).to(tdt).contiguous(
            memory_format=torch.channels_last)
        twc = torch.from_numpy(np.ascontiguousarray(wv.astype(np.float32))).to(tdt).contiguous(
            memory_format=torch.channels_last)

        def ref_conv(xv=xv, wv=wv):
            return torch.nn.functional.conv2d(torch.from_numpy(xv.astype(np.float64)),
                                              torch.from_numpy(wv.astype(np.float64)), padding=1).numpy()
        out.append(Row(f"conv 3x3 NHWC {'bf16' if bf16 else 'f32'}", "x [8,64,56,56] w [64,64,3,3] pad 1",
                       build_conv, {1: xv, 2: wv}, (3, yd, _cl_strides(yd), ndt),
                       lambda txc=txc, twc=twc: torch.nn.functional.conv2d(txc, twc, padding=1), ref_conv,
                       2.0 * 8 * 56 * 56 * 64 * 64 * 9, tol=2e-2 if bf16 else 1e-4))

    # 1-D conv f32 (channels-first, as audio/sequence models store it): N 8, 256 -> 256, L 1024, k 3, pad 1
    xd, wd = [8, 256, 1024], [256, 256, 3]
    x1 = rng.standard_normal(xd).astype(np.float32)
    w1 = (rng.standard_normal(wd) / math.sqrt(256 * 3)).astype(np.float32)

    def build_conv1d():
        g = hd.Graph(name="conv1d", io_data_type=F, compute_data_type=F)
        y = g.conv_fprop(_tensor(g, "x", 1, xd), _tensor(g, "w", 2, wd), padding=[1], stride=[1], dilation=[1])
        y.set_output(True).set_uid(3).set_dim([8, 256, 1024])
        return g
    tx1, tw1 = torch.from_numpy(x1), torch.from_numpy(w1)
    out.append(Row("conv 1-D f32", "x [8,256,1024] w [256,256,3] pad 1 (NCW)", build_conv1d, {1: x1, 2: w1},
                   (3, [8, 256, 1024], [256 * 1024, 1024, 1], np.float32),
                   lambda: torch.nn.functional.conv1d(tx1, tw1, padding=1),
                   lambda: torch.nn.functional.conv1d(torch.from_numpy(x1).double(), torch.from_numpy(w1).double(),
                                                      padding=1).numpy(),
                   2.0 * 8 * 1024 * 256 * 256 * 3, tol=1e-4))

    # causal attention f32: B 1, H 16, S 512, D 64
    qd = [1, 16, 512, 64]
    q, kk, v = (rng.standard_normal(qd).astype(np.float32) for _ in range(3))

    def build_attn():
        g = hd.Graph(name="attn", io_data_type=F, compute_data_type=F)
        o = g.sdpa(_tensor(g, "q", 1, qd), _tensor(g, "k", 2, qd), _tensor(g, "v", 3, qd), is_causal=True,
                   attn_scale=1.0 / 8.0)
        o = o[0] if isinstance(o, (tuple, list)) else o
        o.set_output(True).set_uid(4)
        return g
    tq, tk, tv = (torch.from_numpy(t) for t in (q, kk, v))

    def ref_attn():
        return torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(t).double() for t in (q, kk, v)), is_causal=True, scale=1.0 / 8.0).numpy()
    out.append(Row("causal attention f32", "B1 H16 S512 D64", build_attn, {1: q, 2: kk, 3: v},
                   (4, qd, [512 * 64 * 16, 512 * 64, 64, 1], np.float32),
                   lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True, scale=1.0 / 8.0),
                   ref_attn, 4.0 * 16 * 512 * 512 * 64 / 2, tol=1e-4))

    # layernorm f32: [4096, 1024], scale + bias, inference
    rows_, cols = 4096, 1024
    xl = rng.standard_normal((rows_, cols)).astype(np.float32)
    sc = rng.standard_normal((1, cols)).astype(np.float32)
    bi = rng.standard_normal((1, cols)).astype(np.float32)

    def build_ln():
        g = hd.Graph(name="layernorm", io_data_type=F, compute_data_type=F)
        y = g.layernorm(_tensor(g, "x", 1, [rows_, cols]), _tensor(g, "s", 2, [1, cols]), _tensor(g, "b", 3, [1, cols]),
                        epsilon=1e-5)
        y = y[0] if isinstance(y, (tuple, list)) else y
        y.set_output(True).set_uid(4)
        return g
    txl, tsc, tbi = torch.from_numpy(xl), torch.from_numpy(sc[0]), torch.from_numpy(bi[0])

    def ref_ln():
        x64 = xl.astype(np.float64)
        mu = x64.mean(-1, keepdims=True)
        var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
        return (x64 - mu) / np.sqrt(var + 1e-5) * sc + bi
    out.append(Row("layernorm f32", f"[{rows_}, {cols}] scale+bias", build_ln, {1: xl, 2: sc, 3: bi},
                   (4, [rows_, cols], [cols, 1], np.float32),
                   lambda: torch.nn.functional.layer_norm(txl, (cols,), tsc, tbi, eps=1e-5), ref_ln,
                   None, tol=1e-4))
    return out


def _timed(fn, min_time: float, min_runs: int = 5) -> list[float]:
    out, t_end = [], time.perf_counter() + min_time
    while len(out) < min_runs or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
        if len(out) > 5000:
            break
    return out


def machine() -> dict:
    from importlib import metadata
    model, flags = platform.processor(), []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for ln in f:
                if ln.startswith("model name"):
                    model = ln.split(":", 1)[1].strip()
                elif ln.startswith("flags") and not flags:
                    flags = ln.split(":", 1)[1].split()
    except OSError:
        pass
    vec = sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2", "fma", "avx_vnni")))
    blas = "unknown"
    try:
        cfg = np.show_config(mode="dicts")
        blas = f"{cfg['Build Dependencies']['blas']['name']} {cfg['Build Dependencies']['blas'].get('version', '')}".strip()
    except Exception:  # NOTE: numpy < 2 prints instead of returning
        pass
    try:
        from threadpoolctl import threadpool_info
        blas += " (" + ", ".join(f"{i.get('internal_api')} {i.get('architecture', '')}".strip()
                                 for i in threadpool_info() if i.get("user_api") == "blas") + ")"
    except Exception:  # NOTE: threadpoolctl is optional: it names the kernel OpenBLAS picked
        pass
    import torch
    versions = {d: metadata.version(d) for d in ("iree-base-compiler", "iree-base-runtime", "torch", "numpy")}
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": model,
            "cores": os.cpu_count(), "vector_features": vec, "torch_threads": torch.get_num_threads(),
            "numpy_blas": blas, "openblas_env": {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
                                                 if k in os.environ},
            "load_average": [round(x, 2) for x in os.getloadavg()], "versions": versions}


def measure(row: Row, torch, knobs: dict, min_time: float) -> dict:
    h = hd.create_handle()   # the local CPU device, target llvm-cpu:host
    g = row.build()
    t0 = time.perf_counter()
    if knobs:
        g.validate()
        g.build_operation_graph(h)
        g.create_execution_plan("IREE_LINALG", knobs)
        g.build_plan_at_index(0)
    else:
        g.build(h)
    build_s = time.perf_counter() - t0
    uid, dims, strides, ndt = row.out
    dense = np.zeros(int(np.prod(dims)), ndt)
    y = _strided_view(dense, dims, strides)
    pack = {**row.inputs, uid: y}
    g.execute(h, pack)
    want = row.reference()
    got = y.astype(np.float64)
    err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    loops = {"ours": lambda: g.execute(h, pack), "torch": row.torch_fn}
    if row.numpy_fn is not None:
        loops["numpy"] = row.numpy_fn
    samples = {k: [] for k in loops}
    with torch.inference_mode():
        for fn in loops.values():   # warm-up
            fn()
        # NOTE: one call of each side in turn (the order rotating), for ``min_time`` seconds: on a shared
        # machine the speed moves by 2-5x within seconds, so each ratio is taken between neighbouring
        # calls and the reported ratio is the median of those paired ratios.
        keys, i = list(loops), 0
        t_end = time.perf_counter() + min_time
        while i < 5 or time.perf_counter() < t_end:
            order = keys[i % len(keys):] + keys[:i % len(keys)]
            for k in order:
                t0 = time.perf_counter()
                loops[k]()
                samples[k].append(time.perf_counter() - t0)
            i += 1
            if i >= 20000:
                break
    med = {k: float(np.median(v)) for k, v in samples.items()}
    paired = {k: float(np.median(np.array(samples["ours"]) / np.array(samples[k]))) for k in samples if k != "ours"}
    cfg = g.get_engine_config_at_index(0) if hasattr(g, "get_engine_config_at_index") else None
    res = {"name": row.name, "shape": row.shape, "build_s": round(build_s, 2), "rel_err": err, "ok": err <= row.tol,
           "median_ms": {k: round(v * 1e3, 4) for k, v in med.items()},
           "samples": {k: len(v) for k, v in samples.items()},
           "ours_over_torch": round(paired["torch"], 3),
           "knobs": dict(getattr(cfg, "knobs", {}) or {}) if cfg is not None else knobs}
    if "numpy" in med:
        res["ours_over_numpy"] = round(paired["numpy"], 3)
    if row.flops:
        res["gflops"] = {k: round(row.flops / v / 1e9, 1) for k, v in med.items()}
    g.release()
    return res


def render(meta: dict, results: list[dict]) -> str:
    lines = [f"CPU: {meta['cpu']} ({meta['cores']} cores; {', '.join(meta['vector_features'])}); torch threads "
             f"{meta['torch_threads']}; numpy BLAS {meta['numpy_blas']}; {meta['date']}; load {meta['load_average']}",
             "", "| graph | shape | ours ms | torch ms | ours / torch (paired) | numpy ms | ours / numpy (paired) | rel. err | knobs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        m = r["median_ms"]
        lines.append(f"| {r['name']} | {r['shape']} | {m['ours']:.3f} | {m['torch']:.3f} | {r['ours_over_torch']:.2f} | "
                     f"{m.get('numpy', float('nan')):.3f} | {r.get('ours_over_numpy', float('nan')):.2f} | "
                     f"{r['rel_err']:.1e}{'' if r['ok'] else ' WRONG'} | "
                     f"{', '.join(f'{k}={v}' for k, v in sorted(r['knobs'].items()) if v != 'AUTO') or 'AUTO'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated substrings of row names")
    ap.add_argument("--knob", action="append", default=[], help="NAME=VALUE (IREE engine knob) for every graph")
    ap.add_argument("--min-time", type=float, default=3.0, help="seconds per side per row, over all rounds")
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    import torch
    knobs = dict(kv.split("=", 1) for kv in a.knob)
    meta = machine()
    results = []
    sel = [s.strip() for s in a.only.split(",") if s.strip()]
    for row in rows(torch):
        if sel and not any(s in row.name for s in sel):
            continue
        r = measure(row, torch, knobs, a.min_time)
        results.append(r)
        print(render(meta, [r]).splitlines()[-1], flush=True)
    print()
    print(render(meta, results))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "knobs": knobs, "results": results}, f, indent=1)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
