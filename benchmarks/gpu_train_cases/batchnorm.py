"""Batchnorm training cases: batchnorm (training, running statistics updated) and batchnorm_backward
reading its saved statistics, in one graph, NHWC (N8 C64 28x28); and batchnorm_backward that
recomputes the statistics from x (NCHW). Refs by torch autograd in float64."""
from __future__ import annotations

import hipdnn_iree as hd
from gpu_cases import DT, case, nhwc

N, C, HW = 8, 64, 28
EPS, MOM = 1e-5, 0.1
FL = hd.DataType.FLOAT


def _ref_backward(torch, x, scale, dy):
    xx = x.double().detach().requires_grad_(True)
    w = scale.double().reshape(C).detach().requires_grad_(True)
    b = torch.zeros(C, dtype=torch.float64, device=x.device, requires_grad=True)
    y = torch.nn.functional.batch_norm(xx, None, None, w, b, training=True, eps=EPS)
    y.backward(dy.double())
    return xx.grad, w.grad.reshape(1, C, 1, 1), b.grad.reshape(1, C, 1, 1)


@case
def batchnorm_train_nhwc(dt):
    g = hd.Graph(name="batchnorm_train_nhwc", io_data_type=DT[dt], compute_data_type=FL)
    x = g.tensor(name="x", uid=1, dim=[N, C, HW, HW], stride=nhwc(N, C, HW, HW))
    s, b = g.tensor(name="scale", uid=2, dim=[1, C, 1, 1]), g.tensor(name="bias", uid=3, dim=[1, C, 1, 1])
    rm = g.tensor(name="running_mean", uid=4, dim=[1, C, 1, 1], data_type=FL)
    rv = g.tensor(name="running_var", uid=5, dim=[1, C, 1, 1], data_type=FL)
    dy = g.tensor(name="dy", uid=6, dim=[N, C, HW, HW], stride=nhwc(N, C, HW, HW))
    y, mean, inv, nrm, nrv = g.batchnorm(x, s, b, epsilon=EPS, momentum=MOM, in_running_mean=rm, in_running_var=rv)
    dx, ds, db = g.batchnorm_backward(dy, x, s, mean=mean, inv_variance=inv)
    for t, u in ((y, 10), (mean, 11), (inv, 12), (nrm, 13), (nrv, 14), (dx, 20), (ds, 21), (db, 22)):
        t.set_output(True).set_uid(u)

    def refs(torch, t):
        xx = t[1].double()
        rmean, rvar = t[4].double().reshape(C).clone(), t[5].double().reshape(C).clone()
        yy, m, invstd = torch.native_batch_norm(xx, t[2].double().reshape(C), t[3].double().reshape(C),
                                                rmean, rvar, True, MOM, EPS)
        dx, ds, db = _ref_backward(torch, t[1], t[2], t[6])
        sh = (1, C, 1, 1)
        return {10: yy, 11: m.reshape(sh), 12: invstd.reshape(sh), 13: rmean.reshape(sh), 14: rvar.reshape(sh),
                20: dx, 21: ds, 22: db}

    return g, refs


@case
def batchnorm_backward_recompute(dt):
    g = hd.Graph(name="batchnorm_backward_recompute", io_data_type=DT[dt], compute_data_type=FL)
    x = g.tensor(name="x", uid=1, dim=[N, C, HW, HW])
    s = g.tensor(name="scale", uid=2, dim=[1, C, 1, 1])
    dy = g.tensor(name="dy", uid=3, dim=[N, C, HW, HW])
    dx, ds, db = g.batchnorm_backward(dy, x, s, epsilon=EPS)
    for t, u in ((dx, 10), (ds, 11), (db, 12)):
        t.set_output(True).set_uid(u)

    def refs(torch, t):
        dx, ds, db = _ref_backward(torch, t[1], t[2], t[3])
        return {10: dx, 11: ds, 12: db}

    return g, refs
