"""A/B of the CPU conv_wgrad forms: the swapped correlation (batch <-> channels) as
``linalg.conv_2d_nchw_fchw`` against conv_fprop's channels-last form (``conv_2d_nhwc_hwcf``,
relayouts behind barriers). Each form compiled without the compile cache; executes interleaved with
PyTorch's ``conv2d_weight`` on the same data, medians of 15; results checked against PyTorch.

    python benchmarks/cpu_wgrad_forms.py
"""
import numpy as np
import torch

import hipdnn_iree as hd
from _ab import interleaved_medians, lowering_forms

F = hd.DataType.FLOAT


def nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


def build(n, c, k, hw, stride, channels_last_form):
    with lowering_forms(wgrad_channels_last=channels_last_form):
        ohw = (hw + 2 - 3) // stride + 1
        g = hd.Graph(io_data_type=F)
        dy = g.tensor(name="dy", uid=1, dim=[n, k, ohw, ohw], stride=nhwc(n, k, ohw, ohw))
        x = g.tensor(name="x", uid=2, dim=[n, c, hw, hw], stride=nhwc(n, c, hw, hw))
        g.conv_wgrad(dy, x, padding=[1, 1], stride=[stride, stride]).set_dim([k, c, 3, 3]).set_output(True).set_uid(3)
        h = hd.create_handle(cache=False)
        g.build(h)
    return h, g, ohw


def main():
    torch.set_num_threads(2)
    for (n, c, k, hw, stride) in ((8, 64, 64, 56, 1), (8, 64, 128, 56, 2)):
        rng = np.random.default_rng(0)
        plans = {form: build(n, c, k, hw, stride, form) for form in (False, True)}
        ohw = plans[True][2]
        tdy = torch.from_numpy(rng.standard_normal((n, k, ohw, ohw)).astype(np.float32)).to(memory_format=torch.channels_last)
        tx = torch.from_numpy(rng.standard_normal((n, c, hw, hw)).astype(np.float32)).to(memory_format=torch.channels_last)
        ref = torch.nn.grad.conv2d_weight(tx, (k, c, 3, 3), tdy, stride=stride, padding=1)
        outs = {f: torch.empty((k, c, 3, 3)).to(memory_format=torch.channels_last) for f in plans}

        def run(plan, f):
            h, g = plan[0], plan[1]
            return lambda: g.execute(h, {1: tdy, 2: tx, 3: outs[f]})

        calls = {f: run(plan, f) for f, plan in plans.items()}
        calls["torch"] = lambda: torch.nn.grad.conv2d_weight(tx, (k, c, 3, 3), tdy, stride=stride, padding=1)
        med = interleaved_medians(calls)
        err = {f: float((outs[f] - ref).abs().max() / ref.abs().max()) for f in plans}
        print(f"wgrad nhwc N{n} C{c} -> K{k} {hw}x{hw} s{stride}: channels-first {med[False]:.2f} ms "
              f"(err {err[False]:.1e}), channels-last {med[True]:.2f} ms (err {err[True]:.1e}), "
              f"torch {med['torch']:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
