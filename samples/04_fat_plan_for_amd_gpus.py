"""One plan for several AMD GPUs (and the CPU), built on a machine that has no GPU.

Ahead-of-time compilation for a fleet: a compile-only handle (``device=None``) with a list of
targets compiles one IREE module per target into one plan file (FUSPLAN kind 3). Each machine
that restores the plan runs the module made for its device: an MI300 (gfx942) picks the gfx942
module, a CPU the x86-64 one.

1. Build conv + bias + ReLU (NHWC) for gfx90a (MI200), gfx942 (MI300), gfx950 (MI350),
   gfx1100 (RDNA3) and generic x86-64, and save the plan.
2. List the plan's modules with the plan inspector (what ``hipdnn-iree inspect`` prints).
3. Restore it here, on the CPU: the x86-64 module is chosen; run it and check it against a
   float64 numpy reference.
4. A CPU-only plan of the same graph without the CPU module is refused here with NOT_SUPPORTED
   naming every target it holds, the error a machine without a matching GPU gets.

Prints PASS and exits 0 when all of that holds; exits 1 otherwise. Runs on the CPU (compiling
five modules takes a few seconds).
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

import hipdnn_iree as hd

AMD = ["rocm:gfx90a", "rocm:gfx942", "rocm:gfx950", "rocm:gfx1100"]
N, C, HW, K = 2, 8, 12, 16


def nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


def conv_bias_relu() -> hd.Graph:
    g = hd.Graph(name="conv_bias_relu", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[N, C, HW, HW], stride=nhwc(N, C, HW, HW))
    w = g.tensor(name="w", uid=2, dim=[K, C, 3, 3], stride=nhwc(K, C, 3, 3))
    b = g.tensor(name="b", uid=3, dim=[1, K, 1, 1])
    y = g.pointwise(g.pointwise(g.conv_fprop(x, w, padding=[1, 1]), b, mode=hd.PointwiseMode.ADD),
                    mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_uid(4)             # NHWC, like x (inferred)
    return g


def reference(x, w, b):
    """x, w logical (NCHW / KCRS) float64; 3x3, padding 1."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((N, K, HW, HW))
    for r in range(3):
        for s in range(3):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, r:r + HW, s:s + HW], w[:, :, r, s])
    return np.maximum(out + b, 0)


def main() -> int:
    from hipdnn_iree.backend.plan_info import format_text, read_plan

    fat = hd.create_handle(device=None, target=AMD + ["llvm-cpu:x86-64"])
    graph = conv_bias_relu().build(fat)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "conv_bias_relu.fat.plan")
        hd.save_plan(path, graph.serialize_compiled_plan())
        data = hd.load_plan(path)
        print(f"fat plan: {len(data)} bytes")
        print("\n".join(ln for ln in format_text(read_plan(data)).splitlines() if "] " in ln and "device" in ln))

        cpu = hd.create_handle()
        plan = hd.Graph.from_compiled_plan_file(cpu, path)   # the x86-64 module, mapped in place
        rng = np.random.default_rng(0)
        xs = rng.standard_normal((N, HW, HW, C)).astype(np.float32).transpose(0, 3, 1, 2)   # NHWC memory
        ws = rng.standard_normal((K, 3, 3, C)).astype(np.float32).transpose(0, 3, 1, 2)     # KRSC memory
        bs = rng.standard_normal((1, K, 1, 1)).astype(np.float32)
        y = np.empty((N, HW, HW, K), np.float32).transpose(0, 3, 1, 2)                      # NHWC output
        plan.execute(cpu, {1: xs, 2: ws, 3: bs, 4: y})
        err = float(np.max(np.abs(y - reference(xs.astype(np.float64), ws.astype(np.float64), bs))))
        ok = err < 1e-3
        print(f"restored on the CPU (x86-64 module), max |err| = {err:.2e}")
        plan.release()

    gpu_only = conv_bias_relu().build(hd.create_handle(device=None, target=AMD)).serialize_compiled_plan()
    try:
        hd.Graph.from_compiled_plan(cpu, gpu_only)
        print("an AMD-only plan restored on the CPU: it should have been refused")
        ok = False
    except hd.HipdnnError as e:
        named = all(t in str(e) for t in AMD)
        print(f"AMD-only plan on the CPU: {e.status.name}, every target named: {named}")
        ok = ok and e.status == hd.Status.NOT_SUPPORTED and named
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
