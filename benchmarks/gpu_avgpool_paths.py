"""Average-pool backward, channels-last and padded (the case wrong on the H200), run along several
paths to find which one goes wrong: the engine (torch device tensors; x and dy in mixed layouts),
and the engine's own MLIR compiled here and run in the IREE runtime with dx returned (ABI stripped)
or written into a passed output buffer (``iree.abi.output``, as the engine runs it).

    python benchmarks/gpu_avgpool_paths.py --device cuda --target cuda:sm_80
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

import hipdnn_iree as hd
from gpu_avgpool_variants import plain

M = hd.ResampleMode
N, C, HW, K, S, P = 2, 8, 12, 3, 2, 1
O = (HW + 2 * P - K) // S + 1


def _strides(d, nhwc):
    n, c, h, w = d
    return [h * w * c, 1, w * c, c] if nhwc else [c * h * w, h * w, w, 1]


def graph(mode, x_nhwc, dy_nhwc, with_x=True):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[N, C, HW, HW], stride=_strides([N, C, HW, HW], x_nhwc)) if with_x else None
    dy = g.tensor(name="dy", uid=4, dim=[N, C, O, O], stride=_strides([N, C, O, O], dy_nhwc))
    args = ([K, K], [S, S], [P, P], [P, P])
    dx = g.resample_backward(dy, mode, *args, x=x)
    if not with_x:
        dx.set_dim([N, C, HW, HW]).set_stride(_strides([N, C, HW, HW], x_nhwc))
    dx.set_output(True).set_uid(5)
    return g


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--target", default="cuda:sm_80")
    a = ap.parse_args(argv)
    import iree.compiler as ic
    import iree.runtime as rt
    import torch
    F = torch.nn.functional
    dev = "cuda" if a.device.startswith("cuda") else "cpu"
    driver = "cuda" if dev == "cuda" else "local-task"
    backend, _, chip = a.target.partition(":")
    flags = [f"--iree-cuda-target={chip}"] if backend == "cuda" else ["--iree-llvmcpu-target-cpu=host"]
    h = hd.create_handle(device=a.device, target=a.target if dev == "cuda" else None, cache=False)
    rows = []
    cl = lambda t, on: t.contiguous(memory_format=torch.channels_last if on else torch.contiguous_format)  # noqa: E731
    for mode in (M.AVGPOOL_EXCLUDE_PADDING, M.AVGPOOL_INCLUDE_PADDING):
        dyt = torch.randn(N, C, O, O, device=dev)
        xx = torch.zeros(N, C, HW, HW, dtype=torch.float64, requires_grad=True, device=dev)
        F.avg_pool2d(xx, K, S, P, count_include_pad=mode == M.AVGPOOL_INCLUDE_PADDING).backward(dyt.double())
        ref = xx.grad

        def err(got):
            return float((got.double() - ref).abs().max()) / float(ref.abs().max())

        def record(path, fn):
            try:
                e = fn()
            except Exception as ex:  # noqa: BLE001 -- reported per row
                e = f"{type(ex).__name__}: {str(ex)[:300]}"
            row = {"mode": mode.name, "path": path, "rel_err": e}
            rows.append(row)
            print(json.dumps(row), flush=True)

        for xn, dn, wx in ((1, 1, True), (1, 1, False), (0, 1, True), (1, 0, True), (0, 0, True)):
            def engine(xn=xn, dn=dn, wx=wx):
                g = graph(mode, xn, dn, wx)
                g.build(h)
                xt = cl(torch.randn(N, C, HW, HW, device=dev), xn)
                out = cl(torch.full((N, C, HW, HW), float("nan"), device=dev), dn if wx else xn)   # dx takes dy's stride order
                pack = {4: cl(dyt, dn), 5: out}
                if wx:
                    pack[1] = xt
                g.execute(h, pack)
                if dev == "cuda":
                    torch.cuda.synchronize()
                return err(out)
            record(f"engine x_nhwc={xn} dy_nhwc={dn} x_given={wx}", engine)
        text = graph(mode, 1, 1).get_mlir(target=a.target)
        x_phys = np.zeros((N, HW, HW, C), np.float32)
        dy_phys = np.ascontiguousarray(dyt.cpu().numpy().transpose(0, 2, 3, 1))
        tb = "llvm-cpu" if backend == "llvm-cpu" else backend

        def raw_plain():
            mod = rt.load_vm_flatbuffer(ic.compile_str(plain(text), target_backends=[tb], extra_args=flags), driver=driver)
            got = np.asarray(mod.main(x_phys, dy_phys)).transpose(0, 3, 1, 2)
            return err(torch.from_numpy(np.ascontiguousarray(got)).to(dev))
        record("runtime, dx returned", raw_plain)

        for fill in (float("nan"), 0.0):
            def raw_abi(fill=fill):
                cfg = rt.Config(driver)
                vm = rt.VmModule.copy_buffer(cfg.vm_instance, ic.compile_str(text, target_backends=[tb], extra_args=flags))
                ctx = rt.SystemContext(config=cfg)
                ctx.add_vm_module(vm)
                dev_ = cfg.device
                xa = rt.asdevicearray(dev_, x_phys)
                dya = rt.asdevicearray(dev_, dy_phys)
                oa = rt.asdevicearray(dev_, np.full((N, HW, HW, C), fill, np.float32))
                res = ctx.modules.module.main(xa, dya, oa)
                got_ret = np.asarray(res.to_host()).transpose(0, 3, 1, 2)
                got_buf = np.asarray(oa.to_host()).transpose(0, 3, 1, 2)
                e1 = err(torch.from_numpy(np.ascontiguousarray(got_ret)).to(dev))
                e2 = err(torch.from_numpy(np.ascontiguousarray(got_buf)).to(dev))
                return {"returned": e1, "output_buffer": e2}
            record(f"runtime, iree.abi.output buffer filled {fill}", raw_abi)
    bad = [r for r in rows if not isinstance(r["rel_err"], float) or r["rel_err"] > 1e-5]
    print(f"{len(rows)} rows, {len(bad)} wrong or not a number", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
