"""MoE grouped matmul cases: moe_grouped_matmul in NONE, GATHER and SCATTER routing and
moe_grouped_matmul_backward (E 8, K 256, N 128, 512 routed rows; experts with no row and with one,
rows before the first offset), refs by a per-expert loop in float64 on the same GPU. The runner
fills every input with floats: the routing tensors (INT32: offsets uid 3, token_index uid 5,
token_ks uid 6) are replaced by fixed integer tables (``gpu_cases.VIEWS``) before the run."""
from __future__ import annotations

import hipdnn_iree as hd
from gpu_cases import DT, VIEWS, case

E, K, N, M, TOKENS, TOP_K = 8, 256, 128, 512, 256, 2
OFFSETS = [3, 3, 4, 100, 100, 300, 301, 509]      # rows 0..2 in no expert; experts 0 and 3 empty, 1 and 5 one row
I32 = hd.DataType.INT32
MODE = hd.MoeGroupedMatmulMode


def _forward(name, dt, mode):
    g = hd.Graph(name=name, io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    rows = TOKENS if mode == MODE.GATHER else M
    tok = g.tensor(name="token", uid=1, dim=[1, rows, K])
    w = g.tensor(name="weight", uid=2, dim=[E, K, N])
    off = g.tensor(name="first_token_offset", uid=3, dim=[E, 1, 1], data_type=I32)
    kw = {}
    if mode != MODE.NONE:
        kw["token_index"] = g.tensor(name="token_index", uid=5, dim=[1, M, 1], data_type=I32)
    if mode == MODE.SCATTER:
        kw["token_ks"] = g.tensor(name="token_ks", uid=6, dim=[1, M, 1], data_type=I32)
    g.moe_grouped_matmul(tok, w, off, mode=mode, top_k=TOP_K, **kw).set_output(True).set_uid(4)

    def refs(torch, t):
        token, weight = t[1][0].double(), t[2].double()
        out = torch.zeros((M, N), dtype=torch.float64, device=token.device)
        for e, start in enumerate(OFFSETS):
            end = OFFSETS[e + 1] if e + 1 < E else M
            r = torch.arange(start, end, device=token.device)
            src = t[5][0, r, 0].long() if mode == MODE.GATHER else r
            dst = t[5][0, r, 0].long() * TOP_K + t[6][0, r, 0].long() if mode == MODE.SCATTER else r
            out[dst] = token[src] @ weight[e]
        return {4: out[None]}

    return g, refs


def _routing(torch, t):
    dev = t[1].device
    gen = torch.Generator(device="cpu").manual_seed(7)
    t = dict(t)
    t[3] = torch.tensor(OFFSETS, dtype=torch.int32).reshape(E, 1, 1).to(dev)
    if 6 in t:      # SCATTER: a permutation of the M slots (token, k)
        slot = torch.randperm(M, generator=gen)
        t[5] = (slot // TOP_K).to(torch.int32).reshape(1, M, 1).to(dev)
        t[6] = (slot % TOP_K).to(torch.int32).reshape(1, M, 1).to(dev)
    elif 5 in t:    # GATHER: any token row, some read twice
        t[5] = torch.randint(0, TOKENS, (1, M, 1), generator=gen, dtype=torch.int32).to(dev)
    return t, None


@case
def moe_grouped_matmul_none(dt):
    return _forward("moe_none", dt, MODE.NONE)


@case
def moe_grouped_matmul_gather(dt):
    return _forward("moe_gather", dt, MODE.GATHER)


@case
def moe_grouped_matmul_scatter(dt):
    return _forward("moe_scatter", dt, MODE.SCATTER)


@case
def moe_grouped_matmul_backward(dt):
    g = hd.Graph(name="moe_bwd", io_data_type=DT[dt], compute_data_type=hd.DataType.FLOAT)
    dy = g.tensor(name="doutput", uid=1, dim=[1, M, N])
    tok = g.tensor(name="token", uid=2, dim=[1, M, K])
    off = g.tensor(name="first_token_offset", uid=3, dim=[E, 1, 1], data_type=I32)
    g.moe_grouped_matmul_backward(dy, tok, off).set_output(True).set_uid(4)

    def refs(torch, t):
        dout, token = t[1][0].double(), t[2][0].double()
        dw = torch.zeros((E, K, N), dtype=torch.float64, device=token.device)
        for e, start in enumerate(OFFSETS):
            end = OFFSETS[e + 1] if e + 1 < E else M
            dw[e] = token[start:end].T @ dout[start:end]
        return {4: dw}

    return g, refs


for _name in ("moe_grouped_matmul_none", "moe_grouped_matmul_gather", "moe_grouped_matmul_scatter",
              "moe_grouped_matmul_backward"):
    VIEWS[_name] = _routing
