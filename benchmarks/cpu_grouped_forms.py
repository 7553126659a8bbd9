"""The CPU forms of a grouped 2-D conv_fprop (1 < groups < C): ``linalg.conv_2d_ngchw_gfchw``
(channels-first), ``linalg.conv_2d_nhwgc_gfhwc`` (channels-last, relayouts behind barriers) and one
``conv_2d_nhwc_hwcf`` per group on channel slices.
Each form compiled without the compile cache; executes interleaved with PyTorch's conv2d on the same
data, medians of 15; results checked against PyTorch.

    python benchmarks/cpu_grouped_forms.py
"""
import numpy as np
import torch

import hipdnn_iree as hd
from _ab import interleaved_medians, lowering_forms

F = hd.DataType.FLOAT
FORMS = ("ngchw", "nhwgc", "split")   # conv_2d_ngchw_gfchw; conv_2d_nhwgc_gfhwc; one conv_2d_nhwc_hwcf per group


def nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


def build(n, c, k, g, hw, form, layout):
    with lowering_forms(grouped_channels_last=form != "ngchw", grouped_split_max=64 if form == "split" else 0):
        gr = hd.Graph(io_data_type=F)
        x = gr.tensor(name="x", uid=1, dim=[n, c, hw, hw], stride=nhwc(n, c, hw, hw) if layout == "nhwc" else None)
        w = gr.tensor(name="w", uid=2, dim=[k, c // g, 3, 3], stride=nhwc(k, c // g, 3, 3) if layout == "nhwc" else None)
        y = gr.conv_fprop(x, w, padding=[1, 1]).set_output(True).set_uid(3)
        h = hd.create_handle(cache=False)
        gr.build(h)
    return h, gr


def main():
    torch.set_num_threads(2)
    for (n, c, k, g, hw, layout) in ((8, 128, 128, 32, 56, "nhwc"), (8, 64, 64, 2, 56, "nhwc"), (8, 128, 128, 32, 56, "nchw")):
        rng = np.random.default_rng(0)
        plans = {form: build(n, c, k, g, hw, form, layout) for form in FORMS}
        mf = torch.channels_last if layout == "nhwc" else torch.contiguous_format
        tx = torch.from_numpy(rng.standard_normal((n, c, hw, hw)).astype(np.float32)).to(memory_format=mf)
        tw = torch.from_numpy(rng.standard_normal((k, c // g, 3, 3)).astype(np.float32)).to(memory_format=mf)
        ref = torch.nn.functional.conv2d(tx, tw, padding=1, groups=g)
        outs = {f: torch.empty((n, k, hw, hw)).to(memory_format=mf) for f in plans}

        def run(plan, f):
            h, gr = plan[0], plan[1]
            return lambda: gr.execute(h, {1: tx, 2: tw, 3: outs[f]})

        calls = {f: run(plan, f) for f, plan in plans.items()}
        calls["torch"] = lambda: torch.nn.functional.conv2d(tx, tw, padding=1, groups=g)
        med = interleaved_medians(calls)
        err = {f: float((outs[f] - ref).abs().max() / ref.abs().max()) for f in plans}
        print(f"grouped {layout} N{n} C{c} G{g} -> K{k} {hw}x{hw}: " + ", ".join(
            f"{f} {med[f]:.2f} ms (err {err[f]:.1e})" for f in FORMS) + f", torch {med['torch']:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
