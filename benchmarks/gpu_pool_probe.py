"""Which part of average pooling goes wrong on a GPU: forward alone and backward alone, both
average modes and max pooling, NHWC and NCHW, padded and unpadded, each built on this machine's
GPU (IREE compiler needed) and compared with torch in float64 (max |err| / max |ref| per output).

    python benchmarks/gpu_pool_probe.py --device cuda --target cuda:sm_80
"""
from __future__ import annotations

import argparse
import json
import sys

import hipdnn_iree as hd

M = hd.ResampleMode


def _strides(dims, nhwc):
    n, c, h, w = dims
    return [h * w * c, 1, w * c, c] if nhwc else [c * h * w, h * w, w, 1]


def probe(torch, h, mode, part, nhwc, pad, dev):
    N, C, HW, K, S = 2, 8, 12, 3, 2
    O = (HW + 2 * pad - K) // S + 1
    F = torch.nn.functional
    g = hd.Graph(io_data_type=hd.DataType.FLOAT, compute_data_type=hd.DataType.FLOAT)
    args = ([K, K], [S, S], [pad, pad], [pad, pad])
    x = g.tensor(name="x", uid=1, dim=[N, C, HW, HW], stride=_strides([N, C, HW, HW], nhwc))
    if part == "fwd":
        g.resample(x, mode, *args).set_output(True).set_uid(2)
    else:
        dy = g.tensor(name="dy", uid=4, dim=[N, C, O, O], stride=_strides([N, C, O, O], nhwc))
        g.resample_backward(dy, mode, *args, x=x).set_output(True).set_uid(5)
    g.build(h)
    xt = torch.randn(N, C, HW, HW, device=dev).contiguous(memory_format=torch.channels_last if nhwc else torch.contiguous_format)
    dyt = torch.randn(N, C, O, O, device=dev).contiguous(memory_format=torch.channels_last if nhwc else torch.contiguous_format)
    # NOTE: the reference runs channels-first: torch's CUDA average-pool backward on channels-last
    # float64 tensors disagreed with its own contiguous result (benchmarks/torch_avgpool_channels_last.py)
    xx = xt.double().contiguous().requires_grad_(True)
    yy = F.avg_pool2d(xx, K, S, pad, count_include_pad=mode == M.AVGPOOL_INCLUDE_PADDING)
    yy.backward(dyt.double().contiguous())
    if part == "fwd":
        out = torch.full_like(yy, float("nan"), dtype=torch.float32).contiguous(
            memory_format=torch.channels_last if nhwc else torch.contiguous_format)
        g.execute(h, {1: xt, 2: out})
        ref = yy.detach()
    else:
        out = torch.full_like(xt, float("nan"))
        g.execute(h, {1: xt, 4: dyt, 5: out})
        ref = xx.grad
    torch.cuda.synchronize() if dev == "cuda" else None
    err = float((out.double() - ref).abs().max()) / float(ref.abs().max())
    return err


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--target", default="cuda:sm_80")
    a = ap.parse_args(argv)
    import torch
    dev = "cuda" if a.device.startswith("cuda") else "cpu"
    h = hd.create_handle(device=a.device, target=a.target if dev == "cuda" else None, cache=False)
    rows = []
    for mode in (M.AVGPOOL_EXCLUDE_PADDING, M.AVGPOOL_INCLUDE_PADDING):
        for part in ("fwd", "bwd"):
            for nhwc in (True, False):
                for pad in (1, 0):
                    try:
                        e = probe(torch, h, mode, part, nhwc, pad, dev)
                    except Exception as ex:
                        e = f"{type(ex).__name__}: {str(ex)[:200]}"
                    row = {"mode": mode.name, "part": part, "nhwc": nhwc, "pad": pad, "rel_err": e}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
