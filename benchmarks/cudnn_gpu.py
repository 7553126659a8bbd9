"""cuDNN FE facade on a GPU: correctness on CUDA tensors and per-call cost against torch eager.

The GPU machine has no IREE compiler, so plans are built here through the facade with a
compile-only handle and serialized; the GPU machine restores them through the facade
(``pygraph().deserialize(handle, data)``) and runs them on torch CUDA tensors keyed by UID.
A second path is tried too: the same graphs built through the facade on the GPU machine with
the compile cache filled here (``--cache``); it works only if a build can be served from the
cache without the compiler.

Per-call cost (``run``): a tiny add through the facade, ``hd.Graph.execute``, the plugin's
``run.execute`` and IREE's bare invoke of the same module (the floor), against torch eager, each
with a device synchronize per call, variants interleaved (``_interleaved``); then the floor in fresh
processes under IREE runtime flags and for the tiny plan compiled under other flags
(``COMPILE_VARIANTS``, written by ``compile``).

    python benchmarks/cudnn_gpu.py compile --out .cudnn_plans --cache .cudnn_cache   # here
    python benchmarks/cudnn_gpu.py run --plans .cudnn_plans --cache .cudnn_cache --json out.json   # on the GPU
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

TARGET = "cuda:sm_80"


def _cases(cudnn):
    """name -> (builder(handle, torch) -> (graph, {uid: (shape, stride, dtype, role)}), reference(tensors))."""
    import torch

    def conv_bias_relu(handle):
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        x = torch.empty(4, 16, 20, 20, dtype=torch.float16).to(memory_format=torch.channels_last)
        w = torch.empty(32, 16, 3, 3, dtype=torch.float16).to(memory_format=torch.channels_last)
        b = torch.empty(1, 32, 1, 1, dtype=torch.float16).to(memory_format=torch.channels_last)
        X, W, B = g.tensor_like(x, name="X"), g.tensor_like(w, name="W"), g.tensor_like(b, name="B")
        Y = g.relu(input=g.bias(input=g.conv_fprop(image=X, weight=W, padding=[1, 0], stride=[2, 1],
                                                   dilation=[1, 2]), bias=B))
        Y.set_output(True)
        return g, [X, W, B], [Y]

    def ref_conv(x, w, b):
        return [torch.relu(torch.nn.functional.conv2d(x.float(), w.float(), b.float().reshape(-1), padding=[1, 0],
                                                      stride=[2, 1], dilation=[1, 2])).half()]

    def matmul_bias_gelu(handle):
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        A = g.tensor(name="A", dim=[4, 32, 64], stride=[2048, 64, 1], data_type=torch.float16)
        B = g.tensor(name="B", dim=[1, 64, 48], stride=[3072, 48, 1], data_type=torch.float16)
        bias = g.tensor(name="bias", dim=[1, 1, 48], stride=[48, 48, 1], data_type=torch.float16)
        C = g.gelu(input=g.add(a=g.matmul(A=A, B=B), b=bias))
        C.set_output(True)
        return g, [A, B, bias], [C]

    def ref_mm(a, b, bias):
        return [torch.nn.functional.gelu(a.float() @ b.float() + bias.float()).half()]

    def layernorm(handle):
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        X = g.tensor(name="X", dim=[64, 256], stride=[256, 1])
        S = g.tensor(name="scale", dim=[1, 256], stride=[256, 1])
        Bb = g.tensor(name="bias", dim=[1, 256], stride=[256, 1])
        Y, _, _ = g.layernorm(norm_forward_phase=cudnn.norm_forward_phase.INFERENCE, input=X, scale=S, bias=Bb,
                              epsilon=1e-5)
        Y.set_output(True)
        return g, [X, S, Bb], [Y]

    def ref_ln(x, s, b):
        return [torch.nn.functional.layer_norm(x, [256], s.reshape(-1), b.reshape(-1), eps=1e-5)]

    def sdpa(handle):
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        q = g.tensor(name="Q", dim=[2, 8, 64, 64], stride=[32768, 4096, 64, 1], data_type=torch.float16)
        k = g.tensor(name="K", dim=[2, 2, 64, 64], stride=[8192, 4096, 64, 1], data_type=torch.float16)
        v = g.tensor(name="V", dim=[2, 2, 64, 64], stride=[8192, 4096, 64, 1], data_type=torch.float16)
        O, stats = g.sdpa(q=q, k=k, v=v, attn_scale=0.125, generate_stats=False, use_causal_mask=True)
        O.set_output(True).set_dim([2, 8, 64, 64]).set_stride([32768, 4096, 64, 1])
        return g, [q, k, v], [O]

    def ref_sdpa(q, k, v):
        k2, v2 = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)
        return [torch.nn.functional.scaled_dot_product_attention(q.float(), k2.float(), v2.float(), is_causal=True,
                                                                 scale=0.125).half()]

    def tiny_add(handle):
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, handle=handle)
        a = g.tensor(name="a", dim=[1, 1024], stride=[1024, 1])
        b = g.tensor(name="b", dim=[1, 1024], stride=[1024, 1])
        c = g.add(a=a, b=b)
        c.set_output(True)
        return g, [a, b], [c]

    def ref_add(a, b):
        return [a + b]

    return {"conv_bias_relu_nhwc_f16": (conv_bias_relu, ref_conv), "matmul_bias_gelu_f16": (matmul_bias_gelu, ref_mm),
            "layernorm_f32": (layernorm, ref_ln), "sdpa_causal_gqa_f16": (sdpa, ref_sdpa), "tiny_add_f32": (tiny_add, ref_add)}


def _describe(ts):
    return [{"uid": t.get_uid(), "dim": t.get_dim(), "stride": t.get_stride(), "dtype": t.get_data_type().name}
            for t in ts]


def compile_plans(out: str, cache: str | None) -> None:
    if cache:
        os.environ["HIPDNN_IREE_CACHE_DIR"] = os.path.abspath(cache)
    import hipdnn_iree.cudnn as cudnn
    os.makedirs(out, exist_ok=True)
    handle = cudnn.create_handle(device=None, target=TARGET)
    manifest = {}
    for name, (build, _) in _cases(cudnn).items():
        g, ins, outs = build(handle)
        g.build([cudnn.heur_mode.A])
        with open(os.path.join(out, name + ".plan"), "wb") as f:
            f.write(g.serialize())
        manifest[name] = {"inputs": _describe(ins), "outputs": _describe(outs)}
        print("compiled", name)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    # the tiny plan again under compile flags that change how IREE records and submits work
    from hipdnn_iree.backend.handle import open_handle
    for label, flags in COMPILE_VARIANTS.items():
        h = cudnn.Handle(open_handle(None, TARGET, None, None, None, compile_flags=tuple(flags)))
        g, _, _ = _cases(cudnn)["tiny_add_f32"][0](h)
        g.build([cudnn.heur_mode.A])
        with open(os.path.join(out, f"tiny_add_f32.{label}.variant"), "wb") as f:
            f.write(g.serialize())
        print("compiled tiny_add_f32", label, flags)


# compile-flag variants of the tiny plan whose bare invoke is timed too (run: child processes)
COMPILE_VARIANTS = {"no_memoization": ["--iree-hal-memoization=false"],
                    "no_indirect_command_buffers": ["--iree-hal-indirect-command-buffers=false"]}

_DT = {"HALF": "float16", "FLOAT": "float32"}


def _alloc(torch, d, fill):
    dtype = getattr(torch, _DT[d["dtype"]])
    span = 1 + sum((a - 1) * s for a, s in zip(d["dim"], d["stride"]))
    base = (torch.randn(span, device="cuda") if fill else torch.zeros(span, device="cuda")).to(dtype)
    return base.as_strided(d["dim"], d["stride"])


def _interleaved(variants: dict, rounds: int = 40, per_round: int = 25, warm: int = 30) -> dict:
    """Each variant ``(setup, fn, teardown)`` runs ``per_round`` calls per round, variants in turn
    (order reversed every other round); per-call wall time of every call and the calling thread's
    CPU time per round. Returns median / p10 / p90 per variant."""
    for setup, fn, teardown in variants.values():
        setup()
        for _ in range(warm):
            fn()
        teardown()
    wall = {k: [] for k in variants}
    cpu = {k: [] for k in variants}
    names = list(variants)
    for r in range(rounds):
        for k in (names if r % 2 == 0 else names[::-1]):
            setup, fn, teardown = variants[k]
            setup()
            c = time.thread_time_ns()
            for _ in range(per_round):
                t = time.perf_counter_ns()
                fn()
                wall[k].append((time.perf_counter_ns() - t) / 1e3)
            cpu[k].append((time.thread_time_ns() - c) / per_round / 1e3)
            teardown()
    out = {}
    for k in names:
        w = sorted(wall[k])
        n = len(w)
        out[k] = {"median_us": statistics.median(w), "p10_us": w[n // 10], "p90_us": w[9 * n // 10], "n": n,
                  "thread_cpu_median_us": statistics.median(cpu[k])}
    return out


_FLOOR_CHILD = r"""
import json, statistics, sys, time
import iree.runtime as rt
rt.flags.parse_flags(*sys.argv[3:])          # before the device is created
import torch
import hipdnn_iree.cudnn as cudnn
handle = cudnn.create_handle(device="cuda", target="cuda:sm_80")
g = cudnn.pygraph()
g.deserialize(handle, open(sys.argv[1], "rb").read())
a, b, c = (torch.randn(1, 1024, device="cuda") for _ in range(3))
pack = {1: a, 2: b, 3: c}
g.execute(pack, None, handle=handle)
torch.cuda.synchronize()
assert torch.equal(c, a + b)
mod = g.hd_graph.get_execution_plan().context.module
args = mod.arg_list([mod.dlpack_view(x) for x in (a, b, c)])
rets = mod._rt.VmVariantList(1)
def floor():
    mod.context.invoke(mod.function, args, rets)
    torch.cuda.synchronize()
def facade():
    g.execute(pack, None, handle=handle)
    torch.cuda.synchronize()
res = {}
for name, fn in (("iree_floor", floor), ("facade_execute", facade)):
    for _ in range(50):
        fn()
    w = []
    for _ in range(1000):
        t = time.perf_counter_ns(); fn(); w.append((time.perf_counter_ns() - t) / 1e3)
    w.sort()
    res[name] = {"median_us": statistics.median(w), "p10_us": w[100], "p90_us": w[900], "n": 1000}
json.dump(res, open(sys.argv[2], "w"))
"""


def _floor_in_child(plan_path: str, flags: list[str]) -> dict:
    """The tiny plan's bare invoke and facade execute in a fresh process whose IREE runtime
    flags (``--cuda_use_streams=false``...) are parsed before its CUDA device is created."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        p = subprocess.run([sys.executable, "-c", _FLOOR_CHILD, plan_path, out, *flags], capture_output=True,
                           text=True, timeout=120)
        if p.returncode != 0:
            return {"error": p.stderr[-800:]}
        return json.load(open(out))


def run(plans: str, cache: str | None, out_json: str | None) -> int:
    import torch
    import hipdnn_iree.cudnn as cudnn
    torch.manual_seed(0)
    man = json.load(open(os.path.join(plans, "manifest.json")))
    handle = cudnn.create_handle(device="cuda", target=TARGET)
    auto = cudnn.create_handle()
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "auto_handle": repr(auto),
           "cases": {}, "timing": {}, "cache_build": {}}
    fails = 0
    cases = _cases(cudnn)
    graphs = {}
    for name, spec in man.items():
        g = cudnn.pygraph()
        g.deserialize(handle, open(os.path.join(plans, name + ".plan"), "rb").read())
        ins = [_alloc(torch, d, True) for d in spec["inputs"]]
        outs = [_alloc(torch, d, False) for d in spec["outputs"]]
        pack = {d["uid"]: t for d, t in zip(spec["inputs"] + spec["outputs"], ins + outs)}
        stream = torch.cuda.Stream()
        cudnn.set_stream(handle=handle, stream=stream)
        with torch.cuda.stream(stream):
            g.execute(pack, None, handle=handle)
        cudnn.set_stream(handle=handle, stream=None)
        torch.cuda.synchronize()
        refs = cases[name][1](*ins)
        err = max(float((o.float() - r.float()).abs().max()) for o, r in zip(outs, refs))
        tol = 2e-2 if "f16" in name else 1e-4
        ok = err <= tol * max(1.0, max(float(r.float().abs().max()) for r in refs))
        fails += not ok
        res["cases"][name] = {"max_abs_err": err, "ok": ok}
        print(f"| {name} | {'PASS' if ok else 'FAIL'} | max abs err {err:.3g} |")
        graphs[name] = (g, pack, ins, outs)

    g, pack, (a, b), (c,) = graphs["tiny_add_f32"]
    hd_graph = g.hd_graph
    ctx = hd_graph.get_execution_plan().context
    mod = ctx.module
    from hipdnn_iree.plugins.iree_linalg import run as plugin_run
    # the floor: IREE's own invocation of the same module on the same buffers, arguments prebuilt
    floor_args = mod.arg_list([mod.dlpack_view(pack[t.uid]) for t in ctx.tensors])
    floor_rets = mod._rt.VmVariantList(1)
    sync = torch.cuda.synchronize
    nothing = lambda: None  # noqa: E731
    stream_state = {}

    def with_stream():
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream())

    def without_stream():
        cudnn.set_stream(handle=handle, stream=None)

    class NoInvoke:
        def invoke(self, fn, args, rets):
            pass

    def stub_on():
        stream_state["ctx"] = mod.context
        mod.context = NoInvoke()

    def stub_off():
        mod.context = stream_state.pop("ctx")

    def eager():
        torch.add(a, b, out=c)
        sync()

    def facade():
        g.execute(pack, None)
        sync()

    def facade_set_stream_each_call():
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream())
        g.execute(pack, None, handle=handle)
        sync()

    def facade_handle():
        g.execute(pack, None, handle=handle)
        sync()

    def raw_hd():
        hd_graph.execute(handle.hd, pack)
        sync()

    def plugin():
        plugin_run.execute(ctx, pack)
        sync()

    def floor():
        mod.context.invoke(mod.function, floor_args, floor_rets)
        sync()

    def floor_no_sync():
        mod.context.invoke(mod.function, floor_args, floor_rets)

    def floor_stream_sync():
        torch.cuda.current_stream().synchronize()
        mod.context.invoke(mod.function, floor_args, floor_rets)
        sync()

    def facade_python_only():       # IREE's invoke stubbed out: Python and stream synchronization
        g.execute(pack, None)

    # the binding-cache key as it was before commit 3d7d16e (str() of torch's dtype and device),
    # swapped in for its rounds: before/after in one run, interleaved
    new_key = plugin_run._pack_key

    def old_pack_key(variant_pack):
        if type(variant_pack) is not dict:
            return None
        key = []
        for uid, obj in variant_pack.items():
            k = plugin_run._buffer_key(obj)
            if k is None:
                return None
            key.append((uid, id(obj), k))
        return ("id", tuple(key))

    def old_key_on():
        plugin_run._pack_key = old_pack_key

    def old_key_off():
        plugin_run._pack_key = new_key

    def stream_sync():
        torch.cuda.current_stream().synchronize()

    def stream_query():
        torch.cuda.current_stream().query()

    variants = {
        "torch_eager": (nothing, eager, nothing),
        "facade_execute": (nothing, facade, nothing),
        "facade_execute_before_key_change": (old_key_on, facade, old_key_off),
        "facade_execute_handle_set_stream_once": (with_stream, facade_handle, without_stream),
        "facade_execute_set_stream_each_call": (nothing, facade_set_stream_each_call, without_stream),
        "hd_graph_execute": (nothing, raw_hd, nothing),
        "plugin_run_execute": (nothing, plugin, nothing),
        "iree_invoke_floor": (nothing, floor, nothing),
        "iree_invoke_floor_plus_stream_sync": (nothing, floor_stream_sync, nothing),
        "iree_invoke_no_device_sync": (nothing, floor_no_sync, nothing),
        "facade_execute_invoke_stubbed_no_sync": (stub_on, facade_python_only, stub_off),
        "synchronize_only": (nothing, sync, nothing),
        "current_stream_synchronize": (nothing, stream_sync, nothing),
        "current_stream_query": (nothing, stream_query, nothing),
    }
    res["timing"] = _interleaved(variants)
    for label, r in res["timing"].items():
        print(f"| {label} | {r['median_us']:.1f} us | p10 {r['p10_us']:.1f} | p90 {r['p90_us']:.1f} | "
              f"thread cpu {r['thread_cpu_median_us']:.1f} us |")
    cudnn.set_stream(handle=handle, stream=None)
    torch.add(a, b, out=c)
    g.execute(pack, None)
    sync()
    res["timing_check_after"] = bool(torch.equal(c, a + b))
    plan_path = os.path.join(plans, "tiny_add_f32.plan")
    res["child_runtime_flags"] = {" ".join(fl) or "(defaults)": _floor_in_child(plan_path, fl)
                                  for fl in ([], ["--cuda_use_streams=false"], ["--cuda_async_allocations=false"])}
    res["child_compile_flags"] = {}
    for label, flags in COMPILE_VARIANTS.items():
        path = os.path.join(plans, f"tiny_add_f32.{label}.variant")
        if os.path.exists(path):
            res["child_compile_flags"][" ".join(flags)] = _floor_in_child(path, [])
    for group in ("child_runtime_flags", "child_compile_flags"):
        for fl, r in res[group].items():
            print(group, fl, {k: (round(v["median_us"], 1) if isinstance(v, dict) else v) for k, v in r.items()})

    # the second path: build through the facade on this machine from the carried compile cache
    if cache:
        os.environ["HIPDNN_IREE_CACHE_DIR"] = os.path.abspath(cache)
        for name in ("tiny_add_f32", "layernorm_f32"):
            try:
                gg, _, _ = cases[name][0](handle)
                gg.build([cudnn.heur_mode.A])
                res["cache_build"][name] = "built from the cache (no compiler)"
            except Exception as e:  # noqa: BLE001 -- recorded, this path is being checked
                res["cache_build"][name] = f"{type(e).__name__}: {str(e)[:300]}"
            print("cache build", name, res["cache_build"][name])
    if out_json:
        with open(out_json, "w") as f:
            json.dump(res, f, indent=1)
    return 1 if fails else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["compile", "run"])
    ap.add_argument("--out", default=".cudnn_plans")
    ap.add_argument("--plans", default=".cudnn_plans")
    ap.add_argument("--cache")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.mode == "compile":
        compile_plans(a.out, a.cache)
        return 0
    return run(a.plans, a.cache, a.json)


if __name__ == "__main__":
    sys.exit(main())
