"""Which sdpa shapes the fused path (``iree_linalg_ext.attention``) gets right on a GPU: f16 graphs
built on this machine (IREE compiler needed) over head dims, sequence lengths, causal masking,
grouped-query heads, an additive f16 mask and a BSHD layout, each against torch in float64
(max |err| / max |ref|; cuDNN FE's test_mhas allows 2e-2 absolute).

    python benchmarks/gpu_sdpa_fused_probe.py --device cuda --target cuda:sm_80
"""
from __future__ import annotations

import argparse
import json
import sys

import hipdnn_iree as hd


def _strides(dims, bshd):
    b, h, s, d = dims
    return [s * h * d, d, h * d, 1] if bshd else [h * s * d, s * d, d, 1]


def case(torch, h, dev, sq, skv, dqk, dv, hq=6, hk=6, causal=False, bias=False, bshd=False):
    g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
    q = g.tensor(name="q", uid=1, dim=[2, hq, sq, dqk], stride=_strides([2, hq, sq, dqk], bshd))
    k = g.tensor(name="k", uid=2, dim=[2, hk, skv, dqk], stride=_strides([2, hk, skv, dqk], bshd))
    v = g.tensor(name="v", uid=3, dim=[2, hk, skv, dv], stride=_strides([2, hk, skv, dv], bshd))
    m = g.tensor(name="m", uid=5, dim=[1, 1, sq, skv], stride=[sq * skv, sq * skv, skv, 1]) if bias else None
    o = g.sdpa(q, k, v, attn_scale=0.125, is_causal=causal, mask=m)
    o.set_output(True).set_uid(4).set_stride(_strides([2, hq, sq, dv], bshd))
    g.build(h)

    def mk(d, lay):
        t = torch.randn(*d, device=dev, dtype=torch.float16)
        if lay:
            t = t.transpose(1, 2).contiguous().transpose(1, 2)
        return t
    qt, kt, vt = mk([2, hq, sq, dqk], bshd), mk([2, hk, skv, dqk], bshd), mk([2, hk, skv, dv], bshd)
    ot = mk([2, hq, sq, dv], bshd).fill_(float("nan"))
    pack = {1: qt, 2: kt, 3: vt, 4: ot}
    s = torch.einsum("bhqd,bhkd->bhqk", qt.double(), kt.double().repeat_interleave(hq // hk, 1)) * 0.125
    if bias:
        mt = torch.randn(1, 1, sq, skv, device=dev, dtype=torch.float16)
        pack[5] = mt
        s = s + mt.double()
    if causal:
        s = s.masked_fill(torch.ones(sq, skv, device=dev, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), vt.double().repeat_interleave(hq // hk, 1))
    g.execute(h, pack)
    torch.cuda.synchronize() if dev == "cuda" else None
    return float((ot.double() - ref).abs().max()), float(ref.abs().max())


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--target", default="cuda:sm_80")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    import torch
    torch.manual_seed(0)
    dev = "cuda" if a.device.startswith("cuda") else "cpu"
    h = hd.create_handle(device=a.device, target=a.target if dev == "cuda" else None, cache=False)
    dims = [32, 56, 64, 128, 192, 200, 256, 264, 520]
    cases = []
    for causal in (False, True):
        for d in (dims[:3] if a.quick else dims):
            cases.append(dict(sq=256, skv=256, dqk=d, dv=d, causal=causal))
    if not a.quick:
        cases += [dict(sq=24, skv=2048, dqk=64, dv=64), dict(sq=24, skv=2048, dqk=128, dv=128),
                  dict(sq=1, skv=256, dqk=128, dv=128), dict(sq=2048, skv=24, dqk=64, dv=64),
                  dict(sq=256, skv=256, dqk=128, dv=256), dict(sq=256, skv=256, dqk=64, dv=520),
                  dict(sq=256, skv=256, dqk=256, dv=64),
                  dict(sq=256, skv=256, dqk=64, dv=64, hk=2), dict(sq=256, skv=256, dqk=128, dv=128, hk=1),
                  dict(sq=256, skv=256, dqk=64, dv=64, bias=True), dict(sq=256, skv=256, dqk=128, dv=128, bias=True),
                  dict(sq=256, skv=256, dqk=64, dv=64, bshd=True), dict(sq=256, skv=512, dqk=128, dv=128, bshd=True)]
    bad = 0
    for c in cases:
        try:
            err, top = case(torch, h, dev, **c)
            row = {**c, "max_abs_err": err, "rel_err": err / top, "ok": err <= 2e-2}
        except Exception as ex:  # noqa: BLE001 -- reported per row
            row = {**c, "error": f"{type(ex).__name__}: {str(ex)[:300]}", "ok": False}
        bad += not row["ok"]
        print(json.dumps(row), flush=True)
    print(f"{len(cases)} cases, {bad} wrong or failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
