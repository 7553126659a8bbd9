"""torch's own average-pool backward on one device: channels-last against contiguous inputs, both
in float64, and against the CPU (the same numbers: a reference check for the pooling cases).

    python benchmarks/torch_avgpool_channels_last.py --device cuda
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args(argv)
    import torch
    F = torch.nn.functional
    N, C, HW, K, S = 2, 8, 12, 3, 2
    torch.manual_seed(0)
    for include in (False, True):
        for pad in (1, 0):
            O = (HW + 2 * pad - K) // S + 1
            dy = torch.randn(N, C, O, O, dtype=torch.float64)
            grads = {}
            for where, fmt in (("cpu", torch.contiguous_format), ("cpu", torch.channels_last),
                               (a.device, torch.contiguous_format), (a.device, torch.channels_last)):
                x = torch.zeros(N, C, HW, HW, dtype=torch.float64, device=where).contiguous(memory_format=fmt)
                x.requires_grad_(True)
                y = F.avg_pool2d(x, K, S, pad, count_include_pad=include)
                y.backward(dy.to(where).contiguous(memory_format=fmt))
                grads[f"{where}/{'nhwc' if fmt is torch.channels_last else 'nchw'}"] = x.grad.cpu()
            base = grads["cpu/nchw"]
            row = {"count_include_pad": include, "pad": pad,
                   **{k: float((v - base).abs().max() / base.abs().max()) for k, v in grads.items() if k != "cpu/nchw"}}
            print(json.dumps(row), flush=True)
    print("torch", torch.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
