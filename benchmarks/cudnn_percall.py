"""Per-call cost of a tiny graph through the cuDNN facade, layer by layer, on the CPU.

One process measures one tree (the one on ``sys.path``); a driver alternates processes of two
trees for a before/after comparison. Each variant runs ``--per-block`` calls per block, variants
interleaved block by block; the figure is the median of the blocks' per-call means.

Layers (outer to inner), each called directly with the same buffers:
  facade       ``pygraph.execute({tensor: buffer}, None)``
  hd           ``hd.Graph.execute(handle, {uid: buffer})``
  plugin_run   ``plugins.iree_linalg.run.execute(ctx, {uid: buffer})`` (binding cache, invoke)
  iree_invoke  ``VmContext.invoke`` with the prebuilt argument list (the floor)
  eager        ``torch.add(out=)`` / ``np.add(out=)``

``--stub`` replaces IREE's ``VmContext.invoke`` with a no-op: what remains is Python's cost.
Besides wall time, each block records the calling thread's CPU time (``time.thread_time_ns``),
which a loaded machine disturbs less (time spent descheduled is not counted).

    python benchmarks/cudnn_percall.py --tensors torch --stub --json out.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def build(tensors: str):
    import numpy as np
    import hipdnn_iree.cudnn as cudnn
    from hipdnn_iree.plugins.iree_linalg import run as R
    h = cudnn.create_handle(device="cpu")
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, handle=h)
    a = g.tensor(name="a", dim=[1, 1024], stride=[1024, 1])
    b = g.tensor(name="b", dim=[1, 1024], stride=[1024, 1])
    c = g.add(a=a, b=b)
    c.set_output(True)
    g.build([cudnn.heur_mode.A])
    if tensors == "torch":
        import torch
        A, B, C = torch.randn(1, 1024), torch.randn(1, 1024), torch.empty(1, 1024)
        eager = lambda: torch.add(A, B, out=C)  # noqa: E731
    else:
        from hipdnn_iree.plugin_sdk.buffers import empty_aligned
        A, B, C = [empty_aligned((1, 1024), np.float32) for _ in range(3)]
        A[:], B[:] = np.random.randn(1024), np.random.randn(1024)
        eager = lambda: np.add(A, B, out=C)  # noqa: E731
    pack = {a: A, b: B, c: C}
    upack = {a.get_uid(): A, b.get_uid(): B, c.get_uid(): C}
    g.execute(pack, None)
    ref = A + B
    assert float(abs(C - ref).max()) == 0.0, "facade result differs from the reference"
    hg = g.hd_graph
    ctx = hg.get_execution_plan().context
    mod = ctx.module
    rets = mod._rt.VmVariantList(1)
    args = mod.arg_list([mod.host_view(x) if tensors == "numpy" else mod.dlpack_view(x) for x in (A, B, C)])
    fns = {
        "facade": lambda: g.execute(pack, None),
        "hd": lambda: hg.execute(h.hd, upack),
        "plugin_run": lambda: R.execute(ctx, upack),
        "iree_invoke": lambda: mod.context.invoke(mod.function, args, rets),
        "eager": eager,
    }
    return fns, mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", choices=["torch", "numpy"], default="torch")
    ap.add_argument("--stub", action="store_true", help="IREE's invoke does nothing: Python cost only")
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--per-block", type=int, default=200)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    fns, mod = build(a.tensors)
    if a.stub:
        class _NoInvoke:
            def invoke(self, fn, args, rets):
                pass
        mod.context = _NoInvoke()
    res = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    names = list(fns)
    for blk in range(a.blocks):
        order = names if blk % 2 == 0 else names[::-1]
        for k in order:
            f = fns[k]
            c, t = time.thread_time_ns(), time.perf_counter_ns()
            for _ in range(a.per_block):
                f()
            res[k].append((time.perf_counter_ns() - t) / a.per_block / 1e3)
            cpu[k].append((time.thread_time_ns() - c) / a.per_block / 1e3)
    out = {"tensors": a.tensors, "stub": a.stub, "per_block": a.per_block, "blocks_us": res, "blocks_cpu_us": cpu}
    for k, v in res.items():
        s = sorted(v)
        print(f"{k:12s} median {statistics.median(s):7.2f} us  p10 {s[len(s) // 10]:7.2f}  "
              f"p90 {s[9 * len(s) // 10]:7.2f}  ({len(s)} blocks of {a.per_block})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
