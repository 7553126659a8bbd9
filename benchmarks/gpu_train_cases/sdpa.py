"""sdpa training cases: forward with statistics and sdpa_backward in one graph (inputs q, k, v, do;
outputs o, stats, dq, dk, dv), refs by torch autograd in float64."""
from __future__ import annotations

import math

import hipdnn_iree as hd
from gpu_cases import DT, case


def _train(name, dt, b, hq, hk, s, d, causal):
    g = hd.Graph(name=name, io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    q = g.tensor(name="q", uid=1, dim=[b, hq, s, d])
    k = g.tensor(name="k", uid=2, dim=[b, hk, s, d])
    v = g.tensor(name="v", uid=3, dim=[b, hk, s, d])
    do = g.tensor(name="do", uid=4, dim=[b, hq, s, d])
    o, stats = g.sdpa(q, k, v, is_causal=causal, generate_stats=True)
    dq, dk, dv = g.sdpa_backward(q, k, v, o, do, stats, is_causal=causal)
    for t, u in ((o, 5), (stats, 6), (dq, 7), (dk, 8), (dv, 9)):
        t.set_output(True).set_uid(u)

    def refs(torch, t):
        qq, kk, vv = (t[u].double().detach().requires_grad_(True) for u in (1, 2, 3))
        grp = hq // hk
        sc = qq @ kk.repeat_interleave(grp, 1).transpose(-1, -2) / math.sqrt(d)
        if causal:
            sc = sc.masked_fill(torch.ones(s, s, dtype=torch.bool, device=sc.device).triu(1), -math.inf)
        lse = torch.logsumexp(sc, -1, keepdim=True)
        o = torch.softmax(sc, -1) @ vv.repeat_interleave(grp, 1)
        o.backward(t[4].double())
        return {5: o.detach(), 6: lse.detach(), 7: qq.grad, 8: kk.grad, 9: vv.grad}

    return g, refs


@case
def sdpa_train_causal_gqa(dt):
    return _train("sdpa_train_causal_gqa", dt, 2, 8, 2, 256, 64, True)


@case
def sdpa_train(dt):
    return _train("sdpa_train", dt, 2, 8, 8, 256, 64, False)


@case
def sdpa_train_masked_rows(dt):
    """A boolean keep-mask with every fifth query row fully masked: o, dq are 0 there, stats -inf
    (checked, then set to 0 on both sides so the error figure stays finite), nothing NaN."""
    b, h, s, d = 2, 4, 128, 64
    g = hd.Graph(name="sdpa_train_masked_rows", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    q, k, v, do = (g.tensor(name=n, uid=u, dim=[b, h, s, d]) for n, u in (("q", 1), ("k", 2), ("v", 3), ("do", 4)))
    m = g.tensor(name="keep", uid=10, dim=[b, 1, s, s], data_type=hd.DataType.BOOLEAN)
    o, stats = g.sdpa(q, k, v, mask=m, generate_stats=True)
    dq, dk, dv = g.sdpa_backward(q, k, v, o, do, stats, mask=m)
    for t, u in ((o, 5), (stats, 6), (dq, 7), (dk, 8), (dv, 9)):
        t.set_output(True).set_uid(u)

    def refs(torch, t):
        qq, kk, vv = (t[u].double().detach().requires_grad_(True) for u in (1, 2, 3))
        keep = t[10]
        dead = ~keep.any(-1, keepdim=True)                       # [b, 1, s, 1]
        sc = (qq @ kk.transpose(-1, -2) / math.sqrt(d)).masked_fill(~keep, -math.inf)
        lse = torch.logsumexp(sc, -1, keepdim=True)
        p = torch.softmax(sc.masked_fill(dead, 0.0), -1) * (~dead)
        o = p @ vv
        o.backward(t[4].double())
        st = t[6]
        deadq = dead.expand_as(st)
        if bool(torch.isneginf(st[deadq]).all()):
            st.masked_fill_(deadq, 0.0)                          # checked: -inf there
        lse = lse.detach().masked_fill(deadq, 0.0)
        return {5: o.detach(), 6: lse, 7: qq.grad, 8: kk.grad, 9: vv.grad}

    return g, refs
