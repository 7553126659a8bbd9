"""GPU benchmark: hipdnn-iree vs PyTorch eager and torch.compile, same GPU, same inputs, one run.

    python benchmarks/gpu_bench.py compile --out .gpu_bench [--target cuda:sm_80]   # build machine
    python benchmarks/gpu_bench.py run --plans .gpu_bench --json bench.json          # GPU machine

Graphs (f16 io, f32 compute): matmul 4096^3, NHWC conv 3x3 16x56x56x64->64, matmul+bias+gelu,
a 4-op pointwise chain on 8192^2, layernorm, causal sdpa; plus a tiny graph for per-execute
overhead. Each graph is compiled in several flag variants so before/after compare in one run.
Timing: wall clock around each call after a device sync (hipdnn-iree's call is synchronous),
medians of N after warm-up; torch also with CUDA events (device time). Restore time is measured in
fresh processes with an empty and then a warm CUDA JIT cache (the plans carry sm_80 PTX).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import hipdnn_iree as hd

F16, F32 = hd.DataType.HALF, hd.DataType.FLOAT
P = hd.PointwiseMode
GRAPHS = {}


def graph(variants):
    def wrap(fn):
        GRAPHS[fn.__name__] = (fn, variants)
        return fn
    return wrap


def nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


BASE = {"base": ()}
O3 = {"O3": ("--iree-opt-level=O3",)}
SM89 = {"sm89": ("--iree-cuda-target=sm_89",)}


@graph({**BASE, **O3, **SM89})
def matmul_4096(g):
    a, b = g.tensor(name="a", uid=1, dim=[4096, 4096]), g.tensor(name="b", uid=2, dim=[4096, 4096])
    g.matmul(a, b).set_output(True).set_uid(3)
    return lambda torch, t: t[1] @ t[2]


@graph({**BASE, **O3})   # NOTE: GPU targets now compile convs channels-last by default
def conv_nhwc_3x3(g):
    x = g.tensor(name="x", uid=1, dim=[16, 64, 56, 56], stride=nhwc(16, 64, 56, 56))
    w = g.tensor(name="w", uid=2, dim=[64, 64, 3, 3], stride=nhwc(64, 64, 3, 3))
    g.conv_fprop(x, w, padding=[1, 1]).set_output(True).set_uid(3).set_stride(nhwc(16, 64, 56, 56))
    return lambda torch, t: torch.nn.functional.conv2d(t[1], t[2], padding=1)


@graph({**BASE, **O3})
def matmul_bias_gelu(g):
    x, w = g.tensor(name="x", uid=1, dim=[4096, 4096]), g.tensor(name="w", uid=2, dim=[4096, 4096])
    b = g.tensor(name="b", uid=3, dim=[1, 4096])
    g.pointwise(g.pointwise(g.matmul(x, w), b, mode=P.ADD), mode=P.GELU_FWD).set_output(True).set_uid(4)
    return lambda torch, t: torch.nn.functional.gelu(t[1] @ t[2] + t[3])


@graph({**BASE, **O3})
def chain_8192(g):
    x, b = g.tensor(name="x", uid=1, dim=[8192, 8192]), g.tensor(name="b", uid=2, dim=[1, 8192])
    y = g.pointwise(g.pointwise(x, b, mode=P.ADD), mode=P.RELU_FWD)
    g.pointwise(g.pointwise(y, y, mode=P.MUL), mode=P.TANH_FWD).set_output(True).set_uid(3)
    return lambda torch, t: torch.tanh(torch.relu(t[1] + t[2]) ** 2)


@graph({**BASE, **O3})
def layernorm_8192x4096(g):
    x = g.tensor(name="x", uid=1, dim=[8192, 4096])
    s, b = g.tensor(name="s", uid=2, dim=[1, 4096]), g.tensor(name="b", uid=3, dim=[1, 4096])
    g.layernorm(x, s, b, epsilon=1e-5)[0].set_output(True).set_uid(4)
    return lambda torch, t: torch.nn.functional.layer_norm(t[1], (4096,), t[2][0], t[3][0], eps=1e-5)


# NOTE: O3 fails for cuda in IREE 3.13 ("failed to distribute"); "composition" forces the
# linalg.generic composition (the lowering before the fused attention op) for a same-run comparison.
@graph({**BASE, "composition": ()})
def sdpa_causal(g):
    q, k, v = (g.tensor(name=n, uid=u, dim=[4, 16, 2048, 128]) for n, u in (("q", 1), ("k", 2), ("v", 3)))
    g.sdpa(q, k, v, is_causal=True).set_output(True).set_uid(4)
    return lambda torch, t: torch.nn.functional.scaled_dot_product_attention(t[1], t[2], t[3], is_causal=True)


@graph(BASE)
def tiny_add(g):
    a, b = g.tensor(name="a", uid=1, dim=[4, 4]), g.tensor(name="b", uid=2, dim=[4, 4])
    g.pointwise(a, b, mode=P.ADD).set_output(True).set_uid(3)
    return lambda torch, t: t[1] + t[2]


def _graph(name):
    g = hd.Graph(name=name, io_data_type=F16, compute_data_type=F32)
    ref = GRAPHS[name][0](g)
    return g, ref


def compile_all(target, out, only=None):
    from hipdnn_iree.plugins.iree_linalg import ENGINE_ID
    os.makedirs(out, exist_ok=True)
    manifest = []
    for name, (_, variants) in GRAPHS.items():
        if only and name not in only:
            continue
        for vname, flags in variants.items():
            # NOTE: no compile cache: its key sees the graph and the flags but not a lowering switch, so
            # the "composition" variant would otherwise be served the fused plan of the same graph.
            h = hd.create_handle(device=None, target=target, cache=False)
            h.resource_manager.plugin_for(ENGINE_ID).compile_flags = tuple(flags)
            g, _ = _graph(name)
            t0 = time.perf_counter()
            from lowering.ops import sdpa as sdpa_lowering
            real_blocker = sdpa_lowering.fused_path_blocker
            if vname == "composition":
                sdpa_lowering.fused_path_blocker = lambda *a: "forced by the benchmark"
            try:
                g.build(h)
            except hd.HipdnnError as ex:
                print(f"FAILED {name}/{vname}: {str(ex).splitlines()[0][:200]}", flush=True)
                continue
            finally:
                sdpa_lowering.fused_path_blocker = real_blocker
            path = os.path.join(out, f"{name}.{vname}.plan")
            hd.save_plan(path, g.serialize_compiled_plan())
            d = g.get_execution_plan().context.dispatch_count
            manifest.append({"graph": name, "variant": vname, "flags": list(flags), "plan": os.path.basename(path),
                             "dispatches": d, "compile_s": round(time.perf_counter() - t0, 2)})
            print(f"compiled {name}/{vname}: {d} dispatches in {manifest[-1]['compile_s']} s", flush=True)
    json.dump({"target": target, "plans": manifest}, open(os.path.join(out, "manifest.json"), "w"), indent=1)


def _inputs(torch, tensors):
    gen = torch.Generator(device="cuda").manual_seed(0)
    t = {}
    for x in tensors:
        buf = torch.empty_strided(list(x.dims), list(x.strides), dtype=torch.float16, device="cuda")
        buf.copy_(torch.randn(list(x.dims), generator=gen, device="cuda") * (0.1 if x.name in "abwx" else 1.0))
        t[x.uid] = buf
    return t


def _time(fn, torch, n, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    wall = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        wall.append(time.perf_counter() - t0)
    _LAST_SPREAD[0] = _spread_ms([w * 1e3 for w in wall])
    return statistics.median(wall) * 1e3


_LAST_SPREAD = [None]   # the spread of the latest _time call: kept in the row beside its median


def _spread_ms(xs) -> dict:
    """Quartiles, min, max and sample count of ms samples (what the committed summaries keep)."""
    q = statistics.quantiles(xs, n=4) if len(xs) >= 4 else [min(xs), 0, max(xs)]
    return {"q1": round(q[0], 4), "q3": round(q[2], 4), "min": round(min(xs), 4), "max": round(max(xs), 4), "n": len(xs)}


def _events(fn, torch, n):
    times = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def _bare_invoke(r, t):
    """A bare IREE call of the same module on pre-imported buffer views (the runtime's floor)."""
    ctx = r.get_execution_plan().context
    mod = ctx.module
    from hipdnn_iree.plugin_sdk.buffers import bind_device_pack
    dense = bind_device_pack(ctx.tensors, t, "cuda")
    views = [mod.dlpack_view(dense[x.uid]) for x in ctx.tensors]
    n_out = sum(1 for x in ctx.tensors if x.role == "output")
    return lambda: mod.invoke(views, n_out)


def restore_times(plan_path, n=2):
    """Restore + first execute in fresh processes sharing one (initially empty) CUDA JIT cache."""
    cache = tempfile.mkdtemp(prefix="cudacache_")
    code = ("import time, torch, hipdnn_iree as hd\n"
            "h = hd.create_handle(device='cuda')\n"
            f"data = hd.load_plan({plan_path!r})\n"
            "t0 = time.perf_counter(); r = hd.Graph.from_compiled_plan(h, data); t1 = time.perf_counter()\n"
            # NOTE: buffers in each tensor's declared layout (an NHWC conv refuses contiguous NCHW ones)
            "ts = {x.uid: torch.empty_strided(list(x.dims), list(x.strides), dtype=torch.float16, device='cuda')"
            ".zero_() for x in r.get_compiled_plan_tensors()}\n"
            "t2 = time.perf_counter(); r.execute(h, ts); torch.cuda.synchronize(); t3 = time.perf_counter()\n"
            "print((t1 - t0) * 1e3, (t3 - t2) * 1e3)\n")
    out = []
    for _ in range(n):
        env = dict(os.environ, CUDA_CACHE_PATH=cache, CUDA_CACHE_DISABLE="0")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        vals = p.stdout.split() if p.returncode == 0 else ["nan", "nan"]
        out.append([float(v) for v in vals[-2:]])
    return out   # [[cold restore, cold first exec], [warm restore, warm first exec]]


def run_all(plans, n, out_json):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    manifest = json.load(open(os.path.join(plans, "manifest.json")))
    h = hd.create_handle(device="cuda", target=manifest["target"])
    rows, torch_done = [], {}
    for e in manifest["plans"]:
        name = e["graph"]
        _, ref = _graph(name)
        r = hd.Graph.from_compiled_plan(h, hd.load_plan(os.path.join(plans, e["plan"])))
        t = _inputs(torch, r.get_compiled_plan_tensors())
        outs = {x.uid: t[x.uid] for x in r.get_compiled_plan_tensors() if x.role == "output"}
        ins = {u: v for u, v in t.items() if u not in outs}
        row = {"graph": name, "variant": e["variant"], "dispatches": e["dispatches"]}
        row["hd_ms"] = _time(lambda: r.execute(h, t), torch, n)
        row["hd_ms_spread"] = _LAST_SPREAD[0]
        row["bare_iree_ms"] = _time(_bare_invoke(r, t), torch, n)
        ctx = r.get_execution_plan().context
        ctx.reuse_views = False      # before: every call checks and imports its buffers (HIPDNN_IREE_VIEW_CACHE=0)
        row["hd_nocache_ms"] = _time(lambda: r.execute(h, t), torch, n)
        ctx.reuse_views = True
        (ou,) = list(outs)[:1]
        want = ref(torch, {u: v.float() for u, v in ins.items()}).to(torch.float16)
        row["max_abs_err"] = float((outs[ou].float() - want.float()).abs().max())
        row["ref_max"] = float(want.float().abs().max())
        if name not in torch_done:
            eager = lambda: ref(torch, ins)
            torch_done[name] = {"torch_eager_ms": _time(eager, torch, n), "torch_eager_ms_spread": _LAST_SPREAD[0],
                                "torch_eager_event_ms": _events(eager, torch, n)}
            try:
                compiled = torch.compile(lambda *a: ref(torch, dict(zip(ins, a))))
                args = list(ins.values())
                torch_done[name]["torch_compile_ms"] = _time(lambda: compiled(*args), torch, n, warmup=5)
            except Exception as ex:  # noqa: BLE001 - reported in the table
                torch_done[name]["torch_compile_ms"] = float("nan")
                torch_done[name]["torch_compile_error"] = str(ex)[:200]
        row.update(torch_done[name])
        row["ratio_eager"] = row["hd_ms"] / row["torch_eager_ms"]
        row["ratio_compile"] = row["hd_ms"] / row["torch_compile_ms"] if row["torch_compile_ms"] == row["torch_compile_ms"] else None
        if e["variant"] == "base":
            row["restore_cold_warm"] = restore_times(os.path.join(plans, e["plan"]))
        rows.append(row)
        print(json.dumps(row), flush=True)
        del r, t
        torch.cuda.empty_cache()
    print("\n| graph | variant | dispatches | hipdnn-iree ms | (no view cache) | bare IREE ms | torch eager ms | torch.compile ms | hd/eager | hd/compile |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r_ in rows:
        rc = f"{r_['ratio_compile']:.2f}" if r_["ratio_compile"] else "-"
        print(f"| {r_['graph']} | {r_['variant']} | {r_['dispatches']} | {r_['hd_ms']:.3f} | {r_['hd_nocache_ms']:.3f} | {r_['bare_iree_ms']:.3f} | "
              f"{r_['torch_eager_ms']:.3f} | {r_['torch_compile_ms']:.3f} | {r_['ratio_eager']:.2f} | {rc} |")
    if out_json:
        json.dump(rows, open(out_json, "w"), indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("--target", default="cuda:sm_80")
    c.add_argument("--out", default=".gpu_bench")
    c.add_argument("--only", nargs="*")
    r = sub.add_parser("run")
    r.add_argument("--plans", default=".gpu_bench")
    r.add_argument("-n", type=int, default=20)
    r.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.cmd == "compile":
        compile_all(a.target, a.out, a.only)
    else:
        run_all(a.plans, a.n, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
