"""The issue's four target ratios in one run (interleaved rounds, medians); run in any tree."""
import sys, time, statistics, numpy as np
sys.path.insert(0, "benchmarks")
import hipdnn_iree as hd, cases, suite, torch
def med_loop(fn, t=0.4):
    fn(); out=[]; s=time.perf_counter()
    while len(out) < 5 or time.perf_counter()-s < t:
        a=time.perf_counter(); fn(); out.append(time.perf_counter()-a)
    return out
h = hd.create_handle(cache=False)
C = cases.conv_case
todo = [("3x3 NHWC/KRSC", C("3x3", [8,64,56,56],[64,64,3,3],[1,1],[1,1]), "torch"),
        ("1-D k3/2", C("1d", [1,512,400],[512,512,3],[1],[2], x_layout="cf", w_layout="cf"), "torch"),
        ("matmul 1024^3", cases.matmul(1024), "numpy"),
        ("tiny Graph.execute", cases.tiny_matmul(), "bare")]
for name, c, ref in todo:
    g = c.build(); g.build(h); plan = g.serialize_compiled_plan(); r = hd.Graph.from_compiled_plan(h, plan)
    pack = {u: a for u, (a, _) in c.inputs.items()}
    pack.update({u: cases.strided(np.zeros(int(np.prod(d)), np.float32), d, s) for u, (d, s) in c.outputs.items()})
    other = {"torch": c.torch_fn, "numpy": c.numpy_fn, "bare": suite._bare_runtime(plan, c) if ref == "bare" else None}[ref]
    a, b = [], []
    with torch.inference_mode():
        for _ in range(3):
            a += med_loop(lambda: r.execute(h, pack)); b += med_loop(other)
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"| {name} | {ma*1e3:.3f} ms | {ref} {mb*1e3:.3f} ms | {ma/mb:.2f}x |", flush=True)
