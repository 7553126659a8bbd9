"""Per-token norm training cases (x [4, 512, 1024]): layernorm TRAINING + layernorm_backward, and
rmsnorm TRAINING with bias + rmsnorm_backward with dbias, each in one graph with the statistics
virtual. Refs by torch autograd in float64."""
from __future__ import annotations

import hipdnn_iree as hd
from gpu_cases import DT, case

B, S, E = 4, 512, 1024
EPS = 1e-5
FL = hd.DataType.FLOAT
TRAIN = hd.NormFwdPhase.TRAINING


def _graph(name, dt):
    g = hd.Graph(name=name, io_data_type=DT[dt], compute_data_type=FL)
    x, dy = g.tensor(name="x", uid=1, dim=[B, S, E]), g.tensor(name="dy", uid=2, dim=[B, S, E])
    s, b = g.tensor(name="scale", uid=3, dim=[1, 1, E]), g.tensor(name="bias", uid=4, dim=[1, 1, E])
    return g, x, dy, s, b


def _leaves(t):
    return [t[u].double().detach().requires_grad_(True) for u in (1, 3, 4)]


@case
def layernorm_train(dt):
    g, x, dy, s, b = _graph("layernorm_train", dt)
    y, mean, inv = g.layernorm(x, s, b, epsilon=EPS, forward_phase=TRAIN)
    dx, ds, db = g.layernorm_backward(dy, x, s, mean, inv)
    for t, u in ((y, 10), (mean, 11), (inv, 12), (dx, 20), (ds, 21), (db, 22)):
        t.set_output(True).set_uid(u)

    def refs(torch, t):
        xx, w, bb = _leaves(t)
        m = xx.mean(-1, keepdim=True)
        iv = torch.rsqrt(((xx - m) ** 2).mean(-1, keepdim=True) + EPS)
        yy = (xx - m) * iv * w + bb
        yy.backward(t[2].double())
        return {10: yy.detach(), 11: m.detach(), 12: iv.detach(), 20: xx.grad, 21: w.grad, 22: bb.grad}

    return g, refs


@case
def rmsnorm_train_bias(dt):
    g, x, dy, s, b = _graph("rmsnorm_train_bias", dt)
    y, inv = g.rmsnorm(x, s, epsilon=EPS, forward_phase=TRAIN, bias=b)
    dx, ds, db = g.rmsnorm_backward(dy, x, s, inv, has_dbias=True)
    for t, u in ((y, 10), (inv, 11), (dx, 20), (ds, 21), (db, 22)):
        t.set_output(True).set_uid(u)

    def refs(torch, t):
        xx, w, bb = _leaves(t)
        iv = torch.rsqrt((xx * xx).mean(-1, keepdim=True) + EPS)
        yy = xx * iv * w + bb
        yy.backward(t[2].double())
        return {10: yy.detach(), 11: iv.detach(), 20: xx.grad, 21: w.grad, 22: bb.grad}

    return g, refs
