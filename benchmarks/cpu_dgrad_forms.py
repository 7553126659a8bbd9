"""A/B of the CPU conv_dgrad forms: the channels-first correlation (``linalg.conv_2d_nchw_fchw`` on
the scattered dy) against the channels-last one conv_fprop uses (``conv_2d_nhwc_hwcf``, relayouts
behind barriers). Each form compiled without the compile cache; executes interleaved with PyTorch's
``conv2d_input`` on the same data, medians of 15; the results are checked against PyTorch.

    python benchmarks/cpu_dgrad_forms.py
"""
import numpy as np
import torch

import hipdnn_iree as hd
from _ab import interleaved_medians, lowering_forms

F = hd.DataType.FLOAT


def nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


def build(n, c, k, hw, stride, channels_last_form, layout):
    with lowering_forms(dgrad_channels_last=channels_last_form):
        ohw = (hw + 2 - 3) // stride + 1
        g = hd.Graph(io_data_type=F)
        s_dy = nhwc(n, k, ohw, ohw) if layout == "nhwc" else None
        s_w = nhwc(k, c, 3, 3) if layout == "nhwc" else None
        dy = g.tensor(name="dy", uid=1, dim=[n, k, ohw, ohw], stride=s_dy)
        w = g.tensor(name="w", uid=2, dim=[k, c, 3, 3], stride=s_w)
        g.conv_dgrad(dy, w, padding=[1, 1], stride=[stride, stride]).set_dim([n, c, hw, hw]).set_output(True).set_uid(3)
        h = hd.create_handle(cache=False)
        g.build(h)
    return h, g, ohw


def main():
    torch.set_num_threads(2)
    for (n, c, k, hw, stride, layout) in ((8, 64, 64, 56, 1, "nhwc"), (8, 64, 128, 56, 2, "nhwc"), (8, 64, 64, 56, 1, "nchw")):
        rng = np.random.default_rng(0)
        plans = {form: build(n, c, k, hw, stride, form, layout) for form in (False, True)}
        ohw = plans[True][2]
        tdy = torch.from_numpy(rng.standard_normal((n, k, ohw, ohw)).astype(np.float32))
        tw = torch.from_numpy(rng.standard_normal((k, c, 3, 3)).astype(np.float32))
        if layout == "nhwc":
            tdy, tw = tdy.to(memory_format=torch.channels_last), tw.to(memory_format=torch.channels_last)
        ref = torch.nn.grad.conv2d_input((n, c, hw, hw), tw, tdy, stride=stride, padding=1)
        outs = {f: torch.empty((n, c, hw, hw)).to(memory_format=torch.channels_last if layout == "nhwc"
                                                  else torch.contiguous_format) for f in plans}

        def run(plan, f):
            h, g = plan[0], plan[1]
            return lambda: g.execute(h, {1: tdy, 2: tw, 3: outs[f]})

        calls = {f: run(plan, f) for f, plan in plans.items()}
        calls["torch"] = lambda: torch.nn.grad.conv2d_input((n, c, hw, hw), tw, tdy, stride=stride, padding=1)
        med = interleaved_medians(calls)
        err = {f: float((outs[f] - ref).abs().max() / ref.abs().max()) for f in plans}
        print(f"dgrad {layout} N{n} K{k}->C{c} {hw}x{hw} s{stride}: channels-first {med[False]:.2f} ms "
              f"(err {err[False]:.1e}), channels-last {med[True]:.2f} ms (err {err[True]:.1e}), "
              f"torch {med['torch']:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
