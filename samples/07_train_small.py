"""Train two small models with hipdnn-iree plans and SGD, and check the loss curve against PyTorch.

Two blocks, each as a forward-with-statistics graph and a backward graph built with hd.Graph:

- a ResNet basic block, conv-BN-ReLU-conv-BN-add-ReLU (NHWC), trained to regress a fixed target;
- a pre-norm transformer block: LayerNorm, Q/K/V projections, causal SDPA (with statistics), the
  output projection, a residual, RMSNorm, an MLP (GELU) and a second residual.

The host does the rest of a training step: the loss ``0.5 * mean((out - target)^2)``, its gradient,
and the SGD update of every parameter (torch tensors: the plans read and write them in place
through DLPack). PyTorch trains the same model from the same initial weights with autograd, step
by step; the sample fails when a step's loss differs by more than ``--rtol`` (1e-3) relatively.

    python samples/07_train_small.py                               # CPU: build, train, compare
    python samples/07_train_small.py --target cuda:sm_80 --save-plans DIR   # compile only (no GPU needed)
    python samples/07_train_small.py --device cuda --plans DIR     # GPU: restore the plans, train, compare
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import hipdnn_iree as hd

D = hd.DataType
P = hd.PointwiseMode
F32 = D.FLOAT
TRANSPOSED = 100   # uid offset of a transposed view of a buffer (the backward graphs' transposed operands)


def nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


class _Uids:
    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1
        return self.n


def _out(t, uid, dims=None, strides=None):
    t.set_output(True).set_uid(uid).set_data_type(F32)
    if dims is not None:
        t.set_dim(dims)
    if strides is not None:
        t.set_stride(strides)
    return t


# ---------------------------------------------------------------------------------------------
# ResNet basic block
# ---------------------------------------------------------------------------------------------
class ResNetBlock:
    """x [N, C, H, W] (channels-last) -> relu(bn2(conv2(relu(bn1(conv1(x))))) + x)."""

    def __init__(self, n=8, c=16, hw=8, eps=1e-5, momentum=0.1):
        self.n, self.c, self.hw, self.eps, self.momentum = n, c, hw, eps, momentum
        self.params = ("w1", "s1", "b1", "w2", "s2", "b2")

    # uids: inputs 1..; forward outputs 20..; backward outputs 40..
    X, W1, S1, B1, W2, S2, B2, RM1, RV1, RM2, RV2 = range(1, 12)
    C1, M1, IV1, R1, C2, M2, IV2, A, OUT, NRM1, NRV1, NRM2, NRV2 = range(20, 33)
    DOUT, DX, DW1, DS1, DB1, DW2, DS2, DB2 = range(40, 48)

    def shapes(self):
        n, c, hw = self.n, self.c, self.hw
        act = ([n, c, hw, hw], nhwc(n, c, hw, hw))
        wt = ([c, c, 3, 3], nhwc(c, c, 3, 3))
        ch = ([1, c, 1, 1], [c, 1, 1, 1])
        return act, wt, ch

    def forward_graph(self):
        (ad, as_), (wd, ws), (cd, cs) = self.shapes()
        g = hd.Graph(name="resnet_block_fwd", io_data_type=F32, compute_data_type=F32)
        x = g.tensor(name="x", uid=self.X, dim=ad, stride=as_)
        w1 = g.tensor(name="w1", uid=self.W1, dim=wd, stride=ws)
        w2 = g.tensor(name="w2", uid=self.W2, dim=wd, stride=ws)
        s1, b1, s2, b2, rm1, rv1, rm2, rv2 = (
            g.tensor(name=nm, uid=u, dim=cd, stride=cs) for nm, u in
            (("s1", self.S1), ("b1", self.B1), ("s2", self.S2), ("b2", self.B2), ("rm1", self.RM1),
             ("rv1", self.RV1), ("rm2", self.RM2), ("rv2", self.RV2)))
        c1 = g.conv_fprop(x, w1, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
        y1, m1, iv1, nrm1, nrv1 = g.batchnorm(c1, s1, b1, epsilon=self.eps, momentum=self.momentum,
                                              in_running_mean=rm1, in_running_var=rv1)
        r1 = g.pointwise(y1, mode=P.RELU_FWD)
        c2 = g.conv_fprop(r1, w2, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
        y2, m2, iv2, nrm2, nrv2 = g.batchnorm(c2, s2, b2, epsilon=self.eps, momentum=self.momentum,
                                              in_running_mean=rm2, in_running_var=rv2)
        a = g.pointwise(y2, x, mode=P.ADD)
        out = g.pointwise(a, mode=P.RELU_FWD)
        for t, u in ((c1, self.C1), (r1, self.R1), (c2, self.C2), (a, self.A), (out, self.OUT)):
            _out(t, u, ad, as_)
        for t, u in ((m1, self.M1), (iv1, self.IV1), (m2, self.M2), (iv2, self.IV2), (nrm1, self.NRM1),
                     (nrv1, self.NRV1), (nrm2, self.NRM2), (nrv2, self.NRV2)):
            _out(t, u, cd, cs)
        return g

    def backward_graph(self):
        (ad, as_), (wd, ws), (cd, cs) = self.shapes()
        g = hd.Graph(name="resnet_block_bwd", io_data_type=F32, compute_data_type=F32)
        t = {}
        for nm, u, dims, st in (("dout", self.DOUT, ad, as_), ("a", self.A, ad, as_), ("c2", self.C2, ad, as_),
                                ("r1", self.R1, ad, as_), ("c1", self.C1, ad, as_), ("x", self.X, ad, as_),
                                ("w1", self.W1, wd, ws), ("w2", self.W2, wd, ws), ("s1", self.S1, cd, cs),
                                ("s2", self.S2, cd, cs), ("m1", self.M1, cd, cs), ("iv1", self.IV1, cd, cs),
                                ("m2", self.M2, cd, cs), ("iv2", self.IV2, cd, cs)):
            t[nm] = g.tensor(name=nm, uid=u, dim=dims, stride=st)
        da = g.pointwise(t["dout"], t["a"], mode=P.RELU_BWD)
        dc2, ds2, db2 = g.batchnorm_backward(da, t["c2"], t["s2"], mean=t["m2"], inv_variance=t["iv2"])
        dr1 = g.conv_dgrad(dc2, t["w2"], padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_dim(ad)
        dw2 = g.conv_wgrad(dc2, t["r1"], padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_dim(wd)
        dy1 = g.pointwise(dr1, t["r1"], mode=P.RELU_BWD)
        dc1, ds1, db1 = g.batchnorm_backward(dy1, t["c1"], t["s1"], mean=t["m1"], inv_variance=t["iv1"])
        dx0 = g.conv_dgrad(dc1, t["w1"], padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_dim(ad)
        dw1 = g.conv_wgrad(dc1, t["x"], padding=[1, 1], stride=[1, 1], dilation=[1, 1]).set_dim(wd)
        dx = g.pointwise(dx0, da, mode=P.ADD)
        _out(dx, self.DX, ad, as_)
        _out(dw1, self.DW1, wd, ws)
        _out(dw2, self.DW2, wd, ws)
        for tt, u in ((ds1, self.DS1), (db1, self.DB1), (ds2, self.DS2), (db2, self.DB2)):
            _out(tt, u, cd, cs)
        return g

    # -- host side ------------------------------------------------------------------------------
    def init(self, torch, dev, gen):
        (ad, _), (wd, _), (cd, _) = self.shapes()
        c = self.c

        def cl(t):   # channels-last storage of a logical NCHW tensor
            return t.contiguous(memory_format=torch.channels_last)

        p = {"w1": cl(torch.randn(wd, generator=gen) * (1.0 / math.sqrt(9 * c))),
             "w2": cl(torch.randn(wd, generator=gen) * (1.0 / math.sqrt(9 * c))),
             "s1": 1 + 0.1 * torch.randn(cd, generator=gen), "b1": 0.1 * torch.randn(cd, generator=gen),
             "s2": 1 + 0.1 * torch.randn(cd, generator=gen), "b2": 0.1 * torch.randn(cd, generator=gen)}
        x = cl(torch.randn(ad, generator=gen))
        target = cl(torch.relu(torch.randn(ad, generator=gen)))
        running = {k: (torch.zeros(cd) if k.startswith("rm") else torch.ones(cd)) for k in ("rm1", "rv1", "rm2", "rv2")}
        move = lambda d: {k: v.to(dev) for k, v in d.items()}   # noqa: E731
        return move(p), x.to(dev), target.to(dev), move(running)

    def torch_forward(self, torch, p, x, running):
        F = torch.nn.functional
        c1 = F.conv2d(x, p["w1"], padding=1)
        y1 = F.batch_norm(c1, running["rm1"].view(-1), running["rv1"].view(-1), p["s1"].reshape(-1), p["b1"].reshape(-1),
                          training=True, momentum=self.momentum, eps=self.eps)
        r1 = torch.relu(y1)
        c2 = F.conv2d(r1, p["w2"], padding=1)
        y2 = F.batch_norm(c2, running["rm2"].view(-1), running["rv2"].view(-1), p["s2"].reshape(-1), p["b2"].reshape(-1),
                          training=True, momentum=self.momentum, eps=self.eps)
        return torch.relu(y2 + x)

    def step(self, torch, run_fwd, run_bwd, p, x, target, running, buf):
        """One training step with the plans; returns the loss (before the update)."""
        fwd = {self.X: x, self.W1: p["w1"], self.S1: p["s1"], self.B1: p["b1"], self.W2: p["w2"],
               self.S2: p["s2"], self.B2: p["b2"], self.RM1: running["rm1"], self.RV1: running["rv1"],
               self.RM2: running["rm2"], self.RV2: running["rv2"]}
        fwd.update({u: buf[u] for u in (self.C1, self.M1, self.IV1, self.R1, self.C2, self.M2, self.IV2, self.A,
                                        self.OUT, self.NRM1, self.NRV1, self.NRM2, self.NRV2)})
        run_fwd(fwd)
        out = buf[self.OUT]
        diff = out - target
        loss = 0.5 * float((diff * diff).mean())
        buf[self.DOUT].copy_(diff / diff.numel())
        bwd = {u: buf[u] for u in (self.DOUT, self.A, self.C2, self.R1, self.C1, self.M1, self.IV1, self.M2,
                                   self.IV2, self.DX, self.DW1, self.DS1, self.DB1, self.DW2, self.DS2, self.DB2)}
        bwd.update({self.X: x, self.W1: p["w1"], self.W2: p["w2"], self.S1: p["s1"], self.S2: p["s2"]})
        run_bwd(bwd)
        for k, u in (("rm1", self.NRM1), ("rv1", self.NRV1), ("rm2", self.NRM2), ("rv2", self.NRV2)):
            running[k].copy_(buf[u])
        return loss, {"w1": buf[self.DW1], "s1": buf[self.DS1], "b1": buf[self.DB1], "w2": buf[self.DW2],
                      "s2": buf[self.DS2], "b2": buf[self.DB2]}

    def buffers(self, torch, dev):
        (ad, _), (wd, _), (cd, _) = self.shapes()
        cl = dict(memory_format=torch.channels_last)
        buf = {}
        for u in (self.C1, self.R1, self.C2, self.A, self.OUT, self.DOUT, self.DX):
            buf[u] = torch.empty(ad, device=dev).contiguous(**cl)
        for u in (self.DW1, self.DW2):
            buf[u] = torch.empty(wd, device=dev).contiguous(**cl)
        for u in (self.M1, self.IV1, self.M2, self.IV2, self.NRM1, self.NRV1, self.NRM2, self.NRV2, self.DS1,
                  self.DB1, self.DS2, self.DB2):
            buf[u] = torch.empty(cd, device=dev)
        return buf


# ---------------------------------------------------------------------------------------------
# Pre-norm transformer block
# ---------------------------------------------------------------------------------------------
class TransformerBlock:
    """x [B, 1, S, E] -> x1 = x + proj(sdpa(LN(x))); out = x1 + W2 gelu(W1 RMSNorm(x1)).

    Every tensor is 4-D so that per-head projections are batched matmuls: q = LN(x) [B, 1, S, E]
    @ Wq [1, H, E, D] -> [B, H, S, D]; the output projection o [B, H, S, D] @ Wo [1, H, D, E] summed
    over the heads (a reduction). Transposed operands of the backward graph are strided views.
    """

    def __init__(self, b=4, s=16, e=32, heads=4, ffn=64, eps=1e-5):
        self.b, self.s, self.e, self.h, self.f, self.eps = b, s, e, heads, ffn, eps
        self.d = e // heads
        self.params = ("g1", "be1", "wq", "wk", "wv", "wo", "g2", "w1", "w2")

    X, G1, BE1, WQ, WK, WV, WO, G2, W1, W2 = range(1, 11)
    H, MU, IV, Q, K, V, O, ST, X1, H2, IR, U, ACT, OUT = range(20, 34)
    DOUT, DX, DG1, DBE1, DWQ, DWK, DWV, DWO, DG2, DW1, DW2 = range(40, 51)

    def dims(self):
        b, s, e, h, d, f = self.b, self.s, self.e, self.h, self.d, self.f
        return {"x": [b, 1, s, e], "row": [1, 1, 1, e], "wqkv": [1, h, e, d], "qkv": [b, h, s, d], "wo": [1, h, d, e],
                "stat": [b, 1, s, 1], "st": [b, h, s, 1], "w1": [1, 1, e, f], "u": [b, 1, s, f], "w2": [1, 1, f, e]}

    @staticmethod
    def _packed(dims):
        st, acc = [], 1
        for d in reversed(dims):
            st.append(acc)
            acc *= d
        return st[::-1]

    def _t(self, g, name, uid, key, transpose=False):
        dims = self.dims()[key]
        st = self._packed(dims)
        if transpose:   # the same buffer, its last two axes swapped: uid + TRANSPOSED (see _bind)
            dims = dims[:-2] + [dims[-1], dims[-2]]
            st = st[:-2] + [st[-1], st[-2]]
            uid += TRANSPOSED
        return g.tensor(name=name, uid=uid, dim=dims, stride=st)

    def forward_graph(self):
        dm = self.dims()
        g = hd.Graph(name="transformer_block_fwd", io_data_type=F32, compute_data_type=F32)
        x = self._t(g, "x", self.X, "x")
        g1, be1, g2 = self._t(g, "g1", self.G1, "row"), self._t(g, "be1", self.BE1, "row"), self._t(g, "g2", self.G2, "row")
        wq, wk, wv = (self._t(g, n, u, "wqkv") for n, u in (("wq", self.WQ), ("wk", self.WK), ("wv", self.WV)))
        wo, w1, w2 = self._t(g, "wo", self.WO, "wo"), self._t(g, "w1", self.W1, "w1"), self._t(g, "w2", self.W2, "w2")
        h, mu, iv = g.layernorm(x, g1, be1, epsilon=self.eps, forward_phase=hd.NormFwdPhase.TRAINING)
        q, k, v = g.matmul(h, wq), g.matmul(h, wk), g.matmul(h, wv)
        o, stats = g.sdpa(q, k, v, attn_scale=1.0 / math.sqrt(self.d), is_causal=True, generate_stats=True)
        proj = g.reduction(g.matmul(o, wo), mode=hd.ReductionMode.ADD).set_dim(dm["x"])
        x1 = g.pointwise(x, proj, mode=P.ADD)
        h2, ir = g.rmsnorm(x1, g2, epsilon=self.eps, forward_phase=hd.NormFwdPhase.TRAINING)
        u = g.matmul(h2, w1)
        act = g.pointwise(u, mode=P.GELU_FWD)
        out = g.pointwise(x1, g.matmul(act, w2), mode=P.ADD)
        for t, uid, key in ((h, self.H, "x"), (mu, self.MU, "stat"), (iv, self.IV, "stat"), (q, self.Q, "qkv"),
                            (k, self.K, "qkv"), (v, self.V, "qkv"), (o, self.O, "qkv"), (stats, self.ST, "st"),
                            (x1, self.X1, "x"), (h2, self.H2, "x"), (ir, self.IR, "stat"), (u, self.U, "u"),
                            (act, self.ACT, "u"), (out, self.OUT, "x")):
            _out(t, uid, dm[key], self._packed(dm[key]))
        return g

    def backward_graph(self):
        dm = self.dims()
        g = hd.Graph(name="transformer_block_bwd", io_data_type=F32, compute_data_type=F32)
        T = lambda n, u, key, tr=False: self._t(g, n, u, key, tr)   # noqa: E731
        dout = T("dout", self.DOUT, "x")
        red = hd.ReductionMode.ADD

        def wsum(t, key):   # a weight gradient: the per-batch products summed over the batch axis
            return g.reduction(t, mode=red).set_dim(dm[key])

        # MLP: out = x1 + act @ w2, act = gelu(u), u = h2 @ w1
        dw2 = wsum(g.matmul(T("actT", self.ACT, "u", True), dout), "w2")
        dact = g.matmul(dout, T("w2T", self.W2, "w2", True))
        du = g.pointwise(dact, T("u", self.U, "u"), mode=P.GELU_BWD)
        dw1 = wsum(g.matmul(T("h2T", self.H2, "x", True), du), "w1")
        dh2 = g.matmul(du, T("w1T", self.W1, "w1", True))
        dx1_n, dg2, _ = g.rmsnorm_backward(dh2, T("x1", self.X1, "x"), T("g2", self.G2, "row"), T("ir", self.IR, "stat"))
        dx1 = g.pointwise(dout, dx1_n, mode=P.ADD)
        # attention: x1 = x + sum_h o[:, h] @ wo[h]
        o = T("o", self.O, "qkv")
        dwo = wsum(g.matmul(T("oT", self.O, "qkv", True), dx1), "wo")
        do = g.matmul(dx1, T("woT", self.WO, "wo", True))
        q, k, v = T("q", self.Q, "qkv"), T("k", self.K, "qkv"), T("v", self.V, "qkv")
        dq, dk, dv = g.sdpa_backward(q, k, v, o, do, T("st", self.ST, "st"), attn_scale=1.0 / math.sqrt(self.d),
                                     is_causal=True)
        hT = T("hT", self.H, "x", True)
        grads, dh = {}, None
        for name, dt, wu in (("wq", dq, self.WQ), ("wk", dk, self.WK), ("wv", dv, self.WV)):
            grads[name] = wsum(g.matmul(hT, dt), "wqkv")
            part = g.reduction(g.matmul(dt, T(name + "T", wu, "wqkv", True)), mode=red).set_dim(dm["x"])
            dh = part if dh is None else g.pointwise(dh, part, mode=P.ADD)
        dx_n, dg1, dbe1 = g.layernorm_backward(dh, T("x", self.X, "x"), T("g1", self.G1, "row"),
                                               T("mu", self.MU, "stat"), T("iv", self.IV, "stat"))
        dx = g.pointwise(dx1, dx_n, mode=P.ADD)
        for t, uid, key in ((dx, self.DX, "x"), (dg1, self.DG1, "row"), (dbe1, self.DBE1, "row"),
                            (grads["wq"], self.DWQ, "wqkv"), (grads["wk"], self.DWK, "wqkv"),
                            (grads["wv"], self.DWV, "wqkv"), (dwo, self.DWO, "wo"), (dg2, self.DG2, "row"),
                            (dw1, self.DW1, "w1"), (dw2, self.DW2, "w2")):
            _out(t, uid, dm[key], self._packed(dm[key]))
        return g

    def init(self, torch, dev, gen):
        dm = self.dims()
        e, f = self.e, self.f
        p = {"g1": 1 + 0.1 * torch.randn(dm["row"], generator=gen), "be1": 0.1 * torch.randn(dm["row"], generator=gen),
             "wq": torch.randn(dm["wqkv"], generator=gen) / math.sqrt(e),
             "wk": torch.randn(dm["wqkv"], generator=gen) / math.sqrt(e),
             "wv": torch.randn(dm["wqkv"], generator=gen) / math.sqrt(e),
             "wo": torch.randn(dm["wo"], generator=gen) / math.sqrt(e),
             "g2": 1 + 0.1 * torch.randn(dm["row"], generator=gen),
             "w1": torch.randn(dm["w1"], generator=gen) / math.sqrt(e),
             "w2": torch.randn(dm["w2"], generator=gen) / math.sqrt(f)}
        x = torch.randn(dm["x"], generator=gen)
        target = torch.randn(dm["x"], generator=gen)
        return {k: v.to(dev) for k, v in p.items()}, x.to(dev), target.to(dev), {}

    def torch_forward(self, torch, p, x, running):
        F = torch.nn.functional
        h = F.layer_norm(x, (self.e,), p["g1"].reshape(-1), p["be1"].reshape(-1), eps=self.eps)
        q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.d)
        causal = torch.ones(self.s, self.s, dtype=torch.bool, device=x.device).tril()
        o = torch.softmax(s.masked_fill(~causal, float("-inf")), -1) @ v
        x1 = x + (o @ p["wo"]).sum(1, keepdim=True)
        h2 = x1 * torch.rsqrt((x1 * x1).mean(-1, keepdim=True) + self.eps) * p["g2"]
        return x1 + F.gelu(h2 @ p["w1"]) @ p["w2"]

    def buffers(self, torch, dev):
        dm = self.dims()
        keys = {self.H: "x", self.MU: "stat", self.IV: "stat", self.Q: "qkv", self.K: "qkv", self.V: "qkv",
                self.O: "qkv", self.ST: "st", self.X1: "x", self.H2: "x", self.IR: "stat", self.U: "u", self.ACT: "u",
                self.OUT: "x", self.DOUT: "x", self.DX: "x", self.DG1: "row", self.DBE1: "row", self.DWQ: "wqkv",
                self.DWK: "wqkv", self.DWV: "wqkv", self.DWO: "wo", self.DG2: "row", self.DW1: "w1", self.DW2: "w2"}
        return {u: torch.empty(dm[k], device=dev) for u, k in keys.items()}

    def step(self, torch, run_fwd, run_bwd, p, x, target, running, buf):
        names = {"g1": self.G1, "be1": self.BE1, "wq": self.WQ, "wk": self.WK, "wv": self.WV, "wo": self.WO,
                 "g2": self.G2, "w1": self.W1, "w2": self.W2}
        fwd = {self.X: x, **{u: p[n] for n, u in names.items()}}
        fwd.update({u: buf[u] for u in range(self.H, self.OUT + 1)})
        run_fwd(fwd)
        diff = buf[self.OUT] - target
        loss = 0.5 * float((diff * diff).mean())
        buf[self.DOUT].copy_(diff / diff.numel())
        bwd = {u: buf[u] for u in (self.DOUT, self.ACT, self.U, self.H2, self.X1, self.IR, self.O, self.Q, self.K,
                                   self.V, self.ST, self.H, self.MU, self.IV)}
        bwd.update({self.X: x, self.G1: p["g1"], self.G2: p["g2"], self.WQ: p["wq"], self.WK: p["wk"],
                    self.WV: p["wv"], self.WO: p["wo"], self.W1: p["w1"], self.W2: p["w2"]})
        bwd.update({u: buf[u] for u in range(self.DX, self.DW2 + 1)})
        run_bwd(bwd)
        grads = {"g1": self.DG1, "be1": self.DBE1, "wq": self.DWQ, "wk": self.DWK, "wv": self.DWV, "wo": self.DWO,
                 "g2": self.DG2, "w1": self.DW1, "w2": self.DW2}
        return loss, {n: buf[u] for n, u in grads.items()}


MODELS = {"resnet_block": (ResNetBlock, 0.5), "transformer_block": (TransformerBlock, 0.5)}


def _plans(model, handle, target, plans_dir, save):
    """(forward graph, backward graph), built here or restored from ``plans_dir``."""
    out = []
    for which, build in (("fwd", model.forward_graph), ("bwd", model.backward_graph)):
        path = os.path.join(plans_dir, f"{type(model).__name__}.{which}.plan") if plans_dir else None
        if path and not save:
            out.append(hd.Graph.from_compiled_plan(handle, hd.load_plan(path)))
            continue
        g = build()
        g.build(handle)
        if save:
            hd.save_plan(path, g.serialize_compiled_plan())
        out.append(g)
    return out


def _bind(graph, pack):
    """The variant pack of ``graph``: each bound uid's buffer; a uid ``u + TRANSPOSED`` is ``u``'s buffer
    with its last two axes swapped (a strided view of the same memory)."""
    out = {}
    for t in graph.get_compiled_plan_tensors():
        if t.uid in pack:
            out[t.uid] = pack[t.uid]
        else:
            out[t.uid] = pack[t.uid - TRANSPOSED].transpose(-1, -2)
    return out


def train(name, steps, device, target, plans_dir=None, save=False, rtol=1e-3, seed=0, log=print):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cls, lr = MODELS[name]
    model = cls()
    dev = "cuda" if device.startswith(("cuda", "hip")) else "cpu"
    handle = hd.create_handle(device=None if save else device, target=target) if (save or dev == "cuda") \
        else hd.create_handle()
    t0 = time.perf_counter()
    fwd_g, bwd_g = _plans(model, handle, target, plans_dir, save)
    prep_s = time.perf_counter() - t0
    if save:
        log(f"{name}: plans saved to {plans_dir} ({prep_s:.1f} s)")
        return None
    gen = torch.Generator().manual_seed(seed)
    p, x, tgt, running = model.init(torch, dev, gen)
    ref_p = {k: v.clone().requires_grad_(True) for k, v in p.items()}
    ref_running = {k: v.clone() for k, v in running.items()}
    buf = model.buffers(torch, dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    def run(graph):
        def go(pack):
            graph.execute(handle, _bind(graph, pack))
            sync()
        return go

    run_fwd, run_bwd = run(fwd_g), run(bwd_g)
    worst, ours, theirs = 0.0, [], []
    t1 = time.perf_counter()
    for step in range(steps):
        loss, grads = model.step(torch, run_fwd, run_bwd, p, x, tgt, running, buf)
        with torch.no_grad():
            for k in p:
                p[k] -= lr * grads[k]
        # PyTorch, the same step
        out = model.torch_forward(torch, ref_p, x, ref_running)
        ref_loss = 0.5 * ((out - tgt) ** 2).mean()
        for v in ref_p.values():
            v.grad = None
        ref_loss.backward()
        with torch.no_grad():
            for k, v in ref_p.items():
                v -= lr * v.grad
        rl = float(ref_loss)
        rel = abs(loss - rl) / max(abs(rl), 1e-30)
        worst = max(worst, rel)
        ours.append(loss)
        theirs.append(rl)
        if step % 50 == 0 or step == steps - 1:
            log(f"{name} step {step:3d}: loss {loss:.6f} torch {rl:.6f} rel diff {rel:.1e}")
    train_s = time.perf_counter() - t1
    ok = worst <= rtol and all(math.isfinite(v) for v in ours) and ours[-1] < ours[0]
    log(f"{name}: {steps} steps, loss {ours[0]:.5f} -> {ours[-1]:.5f} (torch {theirs[-1]:.5f}), worst rel diff "
        f"{worst:.2e} (bound {rtol:g}); build/restore {prep_s:.1f} s, train {train_s:.1f} s: {'PASS' if ok else 'FAIL'}")
    return {"model": name, "device": device, "steps": steps, "ok": ok, "worst_rel_diff": worst, "first_loss": ours[0],
            "last_loss": ours[-1], "torch_last_loss": theirs[-1], "prep_s": round(prep_s, 2),
            "train_s": round(train_s, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda to run restored plans on the GPU")
    ap.add_argument("--target", default=None, help="compile target (default: the handle's)")
    ap.add_argument("--plans", default=None, help="restore plans from this folder (GPU run)")
    ap.add_argument("--save-plans", default=None, help="compile the plans into this folder and stop")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: samples/07_train_small.py needs PyTorch (pip install torch); nothing was run")
        return 0
    if args.save_plans:
        os.makedirs(args.save_plans, exist_ok=True)
    results = []
    for name in args.models:
        r = train(name, args.steps, args.device, args.target, args.save_plans or args.plans,
                  save=bool(args.save_plans), rtol=args.rtol)
        if r is not None:
            results.append(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.save_plans:
        return 0
    ok = all(r["ok"] for r in results)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
