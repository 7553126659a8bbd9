"""The Triton flash-attention forward template (imported only when a kernel is generated: it needs ``triton``).

One program computes ``BM`` query rows of one (batch, query head): it walks the keys ``BN`` at a time
with an online softmax (base 2: the scores are multiplied by ``scale * log2 e`` in f32), keeps the
running row max, row sum and the ``[BM, DV]`` accumulator in f32, rounds the softmax weights to v's
element type for the ``p v`` product (f32 accumulation) and divides by the row sum once at the end.
Causal masking is top-left aligned (key ``j`` is kept for query ``i`` iff ``j <= i``, as
``lowering/ops/sdpa.py``): key tiles wholly above the diagonal are never visited, tiles wholly below
it run without a mask, only the tiles that cross it (and a partial last key tile) are masked.
Query head ``h`` reads key head ``h // GK`` and value head ``h // GV`` (grouped-query attention).

Every size, stride, the scale and the flags are ``tl.constexpr``: a compiled kernel's parameters are
only the pointers q, k, v, o (and lse when stats are asked for; otherwise a ``None`` constexpr that
vanishes from the signature), then the two scratch pointers Triton 3.6 appends.
This file's text is part of the generator identity (``triton_matmul.generator_id``): any edit
changes the policy, hence every compile cache key of a plan with generated kernels.
"""
import triton
import triton.language as tl


@triton.jit
def _load(ptrs, rows, cols, NR: tl.constexpr, NC: tl.constexpr, MR: tl.constexpr, MC: tl.constexpr):
    # NOTE: masks only where the tile can cross the tensor's edge (MR: rows, MC: columns)
    if MR and MC:
        x = tl.load(ptrs, mask=(rows[:, None] < NR) & (cols[None, :] < NC), other=0.0)
    elif MR:
        x = tl.load(ptrs, mask=rows[:, None] < NR, other=0.0)
    elif MC:
        x = tl.load(ptrs, mask=cols[None, :] < NC, other=0.0)
    else:
        x = tl.load(ptrs)
    return x


@triton.jit
def _store(ptrs, x, rows, cols, NR: tl.constexpr, NC: tl.constexpr, MR: tl.constexpr, MC: tl.constexpr):
    if MR and MC:
        tl.store(ptrs, x, mask=(rows[:, None] < NR) & (cols[None, :] < NC))
    elif MR:
        tl.store(ptrs, x, mask=rows[:, None] < NR)
    elif MC:
        tl.store(ptrs, x, mask=cols[None, :] < NC)
    else:
        tl.store(ptrs, x)


@triton.jit
def _attend(acc, l_i, m_i, q, k_base, v_base, lo, hi, offs_m, offs_n, offs_d, offs_dv,
            SKV: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, BD: tl.constexpr, BDV: tl.constexpr,
            SKS: tl.constexpr, SKD: tl.constexpr, SVS: tl.constexpr, SVD: tl.constexpr,
            QK_SCALE: tl.constexpr, BN: tl.constexpr, CAUSAL_MASK: tl.constexpr, KV_MASK: tl.constexpr):
    """Key tiles ``[lo, hi)`` (``lo`` a multiple of ``BN``) folded into the running (acc, l_i, m_i)."""
    for start_n in range(lo, hi, BN):
        start_n = tl.multiple_of(start_n, BN)
        cols = start_n + offs_n
        k = _load(k_base + cols[:, None] * SKS + offs_d[None, :] * SKD, cols, offs_d, SKV, D, KV_MASK, BD != D)
        s = tl.dot(q, tl.trans(k)) * QK_SCALE
        if CAUSAL_MASK:
            s = tl.where(cols[None, :] <= offs_m[:, None], s, float("-inf"))
        if KV_MASK:
            s = tl.where(cols[None, :] < SKV, s, float("-inf"))
        # NOTE: every row keeps key 0 in its first tile (top-left causal never empties a row), so
        # m_new is finite from the first tile on and exp2(-inf - m) = 0 for masked scores
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _load(v_base + cols[:, None] * SVS + offs_dv[None, :] * SVD, cols, offs_dv, SKV, DV, KV_MASK, BDV != DV)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def hipdnn_sdpa(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
                HQ: tl.constexpr, SQ: tl.constexpr, SKV: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                GK: tl.constexpr, GV: tl.constexpr,
                SQB: tl.constexpr, SQH: tl.constexpr, SQS: tl.constexpr, SQD: tl.constexpr,
                SKB: tl.constexpr, SKH: tl.constexpr, SKS: tl.constexpr, SKD: tl.constexpr,
                SVB: tl.constexpr, SVH: tl.constexpr, SVS: tl.constexpr, SVD: tl.constexpr,
                SOB: tl.constexpr, SOH: tl.constexpr, SOS: tl.constexpr, SOD: tl.constexpr,
                QK_SCALE: tl.constexpr, CAUSAL: tl.constexpr, STATS: tl.constexpr, OUT_DT: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, BDV: tl.constexpr):
    NUM_M: tl.constexpr = (SQ + BM - 1) // BM
    if CAUSAL:
        # NOTE: the longest rows (most key tiles) first: the tail of the grid gets the short ones
        pid_m = NUM_M - 1 - tl.program_id(0)
    else:
        pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HQ
    h = bh % HQ
    start_m = pid_m * BM
    offs_m = start_m + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, BD)
    offs_dv = tl.arange(0, BDV)
    b64 = b.to(tl.int64)
    q_base = q_ptr + b64 * SQB + h.to(tl.int64) * SQH
    k_base = k_ptr + b64 * SKB + (h // GK).to(tl.int64) * SKH
    v_base = v_ptr + b64 * SVB + (h // GV).to(tl.int64) * SVH
    q = _load(q_base + offs_m[:, None] * SQS + offs_d[None, :] * SQD, offs_m, offs_d, SQ, D, SQ % BM != 0, BD != D)
    m_i = tl.full([BM], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, BDV], dtype=tl.float32)
    # key tiles that need no mask: [0, full); the ones that may: [full, hi)
    FULL_KV: tl.constexpr = (SKV // BN) * BN
    if CAUSAL:
        full = min(start_m, FULL_KV)   # start_m is a multiple of BN (BM % BN == 0)
        hi = min(start_m + BM, SKV)
    else:
        full = FULL_KV
        hi = SKV
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, 0, full, offs_m, offs_n, offs_d, offs_dv,
                            SKV, D, DV, BD, BDV, SKS, SKD, SVS, SVD, QK_SCALE, BN, False, False)
    if CAUSAL or SKV % BN != 0:
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, full, hi, offs_m, offs_n, offs_d, offs_dv,
                                SKV, D, DV, BD, BDV, SKS, SKD, SVS, SVD, QK_SCALE, BN, CAUSAL, SKV % BN != 0)
    o = acc / l_i[:, None]
    o_ptrs = o_ptr + b64 * SOB + h.to(tl.int64) * SOH + offs_m[:, None] * SOS + offs_dv[None, :] * SOD
    if OUT_DT == 1:
        o = o.to(tl.float16)
    elif OUT_DT == 2:
        o = o.to(tl.bfloat16)
    _store(o_ptrs, o, offs_m, offs_dv, SQ, DV, SQ % BM != 0, BDV != DV)
    if STATS:
        # natural-log log-sum-exp of the scaled scores: (m + log2 l) * ln 2, f32 [B, HQ, SQ] row-major
        lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
        tl.store(lse_ptr + bh.to(tl.int64) * SQ + offs_m, lse, mask=offs_m < SQ)
