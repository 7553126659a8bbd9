"""A/B of --iree-opt-data-tiling on the CPU for the model blocks of benchmarks/gpu_blocks.py (f32):
each block compiled twice without the compile cache, executes interleaved, medians of 15.

    python benchmarks/cpu_sdpa_data_tiling.py bert_attention llama_gqa_attention bert_output_ffn llama_swiglu_mlp
"""
import os, sys, time, statistics
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hipdnn_iree as hd, gpu_blocks
from hipdnn_iree.plugins.iree_linalg import targets
from graph_ir import decode_graph

def build(name, tiling):
    saved = targets.CPU_FLAGS
    targets.CPU_FLAGS = ()
    try:
        g, _ = getattr(gpu_blocks, name)("f32")
        h = hd.create_handle(cache=False)
        from hipdnn_iree.plugins.iree_linalg import ENGINE_ID
        h.resource_manager.plugin_for(ENGINE_ID).compile_flags = ("--iree-opt-data-tiling",) if tiling else ()
        g.build(h)
    finally:
        targets.CPU_FLAGS = saved
    return h, g

def pack(g):
    rng = np.random.default_rng(0)
    p = {}
    for t in g.get_compiled_plan_tensors() if g.is_restored else g.get_execution_plan().context.tensors:
        from graph_ir.layout import physical_layout
        lay = physical_layout(t.dims, t.strides)
        a = hd.empty_aligned(lay.phys_shape, np.float32); a[...] = rng.standard_normal(lay.phys_shape) * 0.1
        p[t.uid] = a
    return p

for name in sys.argv[1:]:
    (h1, g1), (h0, g0) = build(name, True), build(name, False)
    p1, p0 = pack(g1), pack(g0)
    d1, d0 = g1.get_execution_plan().context.dispatch_count, g0.get_execution_plan().context.dispatch_count
    t1, t0 = [], []
    for _ in range(3):
        g1.execute(h1, p1); g0.execute(h0, p0)
    for r in range(15):
        for g, h, p, acc in ((g1, h1, p1, t1), (g0, h0, p0, t0)):
            s = time.perf_counter(); g.execute(h, p); acc.append(time.perf_counter() - s)
    print(f"{name}: data tiling {statistics.median(t1)*1e3:.2f} ms ({d1} dispatches), without {statistics.median(t0)*1e3:.2f} ms ({d0} dispatches)", flush=True)
