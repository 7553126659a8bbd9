"""Pooling training cases: resample (forward) and resample_backward in one graph, NHWC
(N8 C64 56x56, 3x3 window, stride 2, padding 1; inputs x, dy; outputs y and dx), refs by torch
autograd in float64. Max pooling's INT32 index stays a virtual tensor between the two nodes (dx
checks it): the runner (benchmarks/gpu_training.py) allocates every output in the io type, so an
INT32 output buffer is refused."""
from __future__ import annotations

import hipdnn_iree as hd
from gpu_cases import DT, case, nhwc

N, C, HW, K, S, P = 8, 64, 56, 3, 2, 1
O = (HW + 2 * P - K) // S + 1


def _pool(name, dt, mode):
    g = hd.Graph(name=name, io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[N, C, HW, HW], stride=nhwc(N, C, HW, HW))
    dy = g.tensor(name="dy", uid=4, dim=[N, C, O, O], stride=nhwc(N, C, O, O))
    args = ([K, K], [S, S], [P, P], [P, P])
    if mode == hd.ResampleMode.MAXPOOL:
        y, index = g.resample(x, mode, *args, generate_index=True)
        dx = g.resample_backward(dy, mode, *args, index=index).set_dim([N, C, HW, HW])
    else:
        y = g.resample(x, mode, *args)
        dx = g.resample_backward(dy, mode, *args, x=x)
    y.set_output(True).set_uid(2)
    dx.set_output(True).set_uid(5)

    def refs(torch, t):
        F = torch.nn.functional
        # NOTE: the reference runs channels-first (contiguous): torch's CUDA average-pool backward on
        # channels-last float64 tensors disagreed with its CPU and contiguous results on the H200
        # (benchmarks/torch_avgpool_channels_last.py)
        xx = t[1].double().contiguous().detach().requires_grad_(True)
        out = {}
        if mode == hd.ResampleMode.MAXPOOL:
            yy = F.max_pool2d(xx, K, S, P)
        else:
            yy = F.avg_pool2d(xx, K, S, P, count_include_pad=mode == hd.ResampleMode.AVGPOOL_INCLUDE_PADDING)
        yy.backward(t[4].double().contiguous())
        out.update({2: yy.detach(), 5: xx.grad})
        return out

    return g, refs


@case
def maxpool_train_nhwc(dt):
    return _pool("maxpool_train_nhwc", dt, hd.ResampleMode.MAXPOOL)


@case
def avgpool_train_nhwc(dt):
    return _pool("avgpool_train_nhwc", dt, hd.ResampleMode.AVGPOOL_EXCLUDE_PADDING)
