"""cuDNN FE facade on a GPU: correctness on CUDA tensors and per-call cost against torch eager.

The GPU machine has no IREE compiler, so plans are built here through the facade with a
compile-only handle and serialized; the GPU machine restores them through the facade
(``pygraph().deserialize(handle, data)``) and runs them on torch CUDA tensors keyed by UID.
A second path is tried too: the same graphs built through the facade on the GPU machine with
the compile cache filled here (``--cache``); it works only if a build can be served from the
cache without the compiler.

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


_DT = {"HALF": "float16", "FLOAT": "float32"}


def _alloc(torch, d, fill):
    dtype = getattr(torch, _DT[d["dtype"]])
    span = 1 + sum((a - 1) * s for a, s in zip(d["dim"], d["stride"]))
    base = (torch.randn(span, device="cuda") if fill else torch.zeros(span, device="cuda")).to(dtype)
    return base.as_strided(d["dim"], d["stride"])


def _time(fn, n=300, warm=30):
    for _ in range(warm):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    out.sort()
    return {"median_us": statistics.median(out), "p10_us": out[n // 10], "p90_us": out[9 * n // 10], "n": n}


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

    def facade():
        g.execute(pack, None)
        torch.cuda.synchronize()

    def facade_stream():
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream())
        g.execute(pack, None, handle=handle)
        torch.cuda.synchronize()

    def raw_hd():
        hd_graph.execute(handle.hd, pack)
        torch.cuda.synchronize()

    def eager():
        torch.add(a, b, out=c)
        torch.cuda.synchronize()

    def sync_only():
        torch.cuda.synchronize()

    for label, fn in (("torch_eager", eager), ("facade_execute", facade), ("facade_execute_set_stream", facade_stream),
                      ("hd_graph_execute", raw_hd), ("synchronize_only", sync_only), ("torch_eager_2", eager),
                      ("facade_execute_2", facade)):
        res["timing"][label] = _time(fn)
        print(f"| {label} | {res['timing'][label]['median_us']:.1f} us |")
    cudnn.set_stream(handle=handle, stream=None)

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
