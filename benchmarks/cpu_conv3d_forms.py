"""A/B of the CPU forms of an ungrouped 3-D conv_fprop: ``linalg.conv_3d_ndhwc_dhwcf`` against KD
channels-last 2-D convs (``conv_2d_nhwc_hwcf``, depth folded into the batch) accumulating into one
output. Each form compiled without the compile cache; executes interleaved with PyTorch's conv3d on
the same data, medians of 15; results checked against PyTorch.

    python benchmarks/cpu_conv3d_forms.py
"""
import numpy as np
import torch

import hipdnn_iree as hd
from _ab import interleaved_medians, lowering_forms

F = hd.DataType.FLOAT


def ndhwc(n, c, d, h, w):
    return [d * h * w * c, 1, h * w * c, w * c, c]


def build(n, c, k, d, hw, stride, as_2d):
    with lowering_forms(conv3d_as_2d=as_2d):
        g = hd.Graph(io_data_type=F)
        x = g.tensor(name="x", uid=1, dim=[n, c, d, hw, hw], stride=ndhwc(n, c, d, hw, hw))
        w = g.tensor(name="w", uid=2, dim=[k, c, 3, 3, 3], stride=ndhwc(k, c, 3, 3, 3))
        y = g.conv_fprop(x, w, padding=[1, 1, 1], stride=[stride] * 3)
        y.set_output(True).set_uid(3)
        h = hd.create_handle(cache=False)
        g.build(h)
    return h, g, y.get_dim()


def main():
    torch.set_num_threads(2)
    for (n, c, k, d, hw, stride) in ((2, 32, 64, 8, 28, 1), (2, 64, 64, 16, 28, 2)):
        rng = np.random.default_rng(0)
        plans = {form: build(n, c, k, d, hw, stride, form) for form in (False, True)}
        ydims = plans[True][2]
        mf = torch.channels_last_3d
        tx = torch.from_numpy(rng.standard_normal((n, c, d, hw, hw)).astype(np.float32)).to(memory_format=mf)
        tw = torch.from_numpy(rng.standard_normal((k, c, 3, 3, 3)).astype(np.float32)).to(memory_format=mf)
        ref = torch.nn.functional.conv3d(tx, tw, padding=1, stride=stride)
        outs = {f: torch.empty(ydims).to(memory_format=mf) for f in plans}

        def run(plan, f):
            h, g = plan[0], plan[1]
            return lambda: g.execute(h, {1: tx, 2: tw, 3: outs[f]})

        calls = {f: run(plan, f) for f, plan in plans.items()}
        calls["torch"] = lambda: torch.nn.functional.conv3d(tx, tw, padding=1, stride=stride)
        med = interleaved_medians(calls)
        err = {f: float((outs[f] - ref).abs().max() / ref.abs().max()) for f in plans}
        print(f"conv3d NDHWC N{n} C{c} -> K{k} {d}x{hw}x{hw} s{stride}: conv_3d_ndhwc_dhwcf {med[False]:.2f} ms "
              f"(err {err[False]:.1e}), 2-D convs {med[True]:.2f} ms (err {err[True]:.1e}), torch {med['torch']:.2f} ms",
              flush=True)


if __name__ == "__main__":
    main()
