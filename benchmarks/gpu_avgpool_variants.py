"""Average-pool backward on a GPU, localised: the engine's MLIR for resample_backward (get_mlir), and
the same text with `util.optimization_barrier` after the input transpose of dy and/or before the output
transpose of dx, each compiled here and run in the IREE runtime, against torch in float64, over
NHWC/NCHW x/dy, padding 0/1 and both average modes.

    python benchmarks/gpu_avgpool_variants.py --driver cuda --target cuda:sm_80     (GPU machine)
    python benchmarks/gpu_avgpool_variants.py --driver local-task --target llvm-cpu:host
"""
from __future__ import annotations

import argparse
import json
import re
import sys

import numpy as np

import hipdnn_iree as hd

M = hd.ResampleMode
N, C, HW, K, S = 2, 8, 12, 3, 2


def _strides(d, nhwc):
    n, c, h, w = d
    return [h * w * c, 1, w * c, c] if nhwc else [c * h * w, h * w, w, 1]


def graph_mlir(mode, pad, nx, ndy, target):
    O = (HW + 2 * pad - K) // S + 1
    g = hd.Graph(io_data_type=hd.DataType.FLOAT, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[N, C, HW, HW], stride=_strides([N, C, HW, HW], nx))
    dy = g.tensor(name="dy", uid=4, dim=[N, C, O, O], stride=_strides([N, C, O, O], ndy))
    g.resample_backward(dy, mode, [K, K], [S, S], [pad, pad], [pad, pad], x=x).set_output(True).set_uid(5)
    return g.get_mlir(target=target), O


def plain(text):
    """Drop the output-argument ABI: main(x, dy) -> dx."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("func.func @main("):
            m = re.match(r"func\.func @main\((%arg0: [^,]+), (%arg1: [^,]+), %arg2: .*?\) -> \(([^)]*)\)", ln)
            lines[i] = f"func.func @main({m.group(1)}, {m.group(2)}) -> ({m.group(3)}) {{"
    return "\n".join(lines)


def variant(text, bar_in, bar_out):
    lines = text.splitlines()
    ret = next(ln for ln in lines if ln.strip().startswith("return "))
    last = ret.split()[1]
    final = next((ln for ln in lines if ln.strip().startswith(last + " = linalg.transpose")), None)
    tdy = next((ln for ln in lines if "ins(%arg1 :" in ln and "linalg.transpose" in ln), None)
    out = []
    for ln in lines:
        if bar_out and final is not None and ln == final:
            src, ty = re.search(r"ins\((%\w+) : ([^)]+)\)", ln).groups()
            out.append(f"  {src}_b = util.optimization_barrier {src} : {ty}")
            ln = ln.replace(f"ins({src} :", f"ins({src}_b :")
        out.append(ln)
        if bar_in and tdy is not None and ln == tdy:
            name = ln.split("=")[0].strip()
            ty = re.search(r"outs\(%\w+ : ([^)]+)\)", ln).group(1)
            out.append(f"  {name}_b = util.optimization_barrier {name} : {ty}")
        if bar_in and tdy is None and ln.startswith("func.func @main("):
            ty = re.search(r"%arg1: ([^,)]+)", ln).group(1)
            out.append(f"  %arg1_b = util.optimization_barrier %arg1 : {ty}")
    text = "\n".join(out)
    if bar_in:
        name = tdy.split("=")[0].strip() if tdy is not None else "%arg1"
        text = re.sub(rf"tensor\.extract {re.escape(name)}\[", f"tensor.extract {name}_b[", text)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", default="cuda")
    ap.add_argument("--target", default="cuda:sm_80")
    ap.add_argument("--dump", default=None, help="write each variant's MLIR into this folder")
    a = ap.parse_args(argv)
    import iree.compiler as ic
    import iree.runtime as rt
    import torch
    F = torch.nn.functional
    backend, _, chip = a.target.partition(":")
    flags = [f"--iree-cuda-target={chip}"] if backend == "cuda" else ["--iree-llvmcpu-target-cpu=host"]
    cfg = rt.Config(a.driver)
    rng = np.random.default_rng(0)
    rows = []
    for mode in (M.AVGPOOL_EXCLUDE_PADDING, M.AVGPOOL_INCLUDE_PADDING):
        for pad in (1, 0):
            for nx, ndy in ((1, 1), (0, 0)):
                text, O = graph_mlir(mode, pad, nx, ndy, a.target)
                text = plain(text)
                dy = rng.standard_normal((N, C, O, O)).astype(np.float32)
                xx = torch.zeros(N, C, HW, HW, dtype=torch.float64, requires_grad=True)
                F.avg_pool2d(xx, K, S, pad, count_include_pad=mode == M.AVGPOOL_INCLUDE_PADDING).backward(
                    torch.from_numpy(dy).double())
                ref = xx.grad.numpy()
                x_phys = np.zeros((N, HW, HW, C) if nx else (N, C, HW, HW), np.float32)
                dy_phys = np.ascontiguousarray(dy.transpose(0, 2, 3, 1)) if ndy else dy
                for bi, bo in ((False, False), (True, False), (False, True), (True, True)):
                    v = variant(text, bi, bo)
                    row = {"mode": mode.name, "pad": pad, "x_nhwc": nx, "dy_nhwc": ndy,
                           "barrier_in": bi, "barrier_out": bo}
                    try:
                        vm = ic.compile_str(v, target_backends=[backend if backend != "llvm-cpu" else "llvm-cpu"],
                                            extra_args=flags)
                        mod = rt.load_vm_flatbuffer(vm, driver=a.driver)
                        got = np.asarray(mod.main(x_phys, dy_phys))
                        if nx:
                            got = got.transpose(0, 3, 1, 2)
                        row["rel_err"] = float(np.abs(got - ref).max() / np.abs(ref).max())
                    except Exception as ex:  # noqa: BLE001 -- reported per row
                        row["rel_err"] = f"{type(ex).__name__}: {str(ex)[:300]}"
                    if a.dump:
                        import os
                        os.makedirs(a.dump, exist_ok=True)
                        tag = f"{mode.name}_p{pad}_x{nx}_dy{ndy}_bi{int(bi)}_bo{int(bo)}"
                        open(os.path.join(a.dump, tag + ".mlir"), "w").write(v)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    bad = [r for r in rows if not isinstance(r["rel_err"], float) or r["rel_err"] > 1e-5]
    print(f"{len(rows)} rows, {len(bad)} wrong or failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
