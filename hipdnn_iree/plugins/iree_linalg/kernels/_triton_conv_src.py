"""The Triton implicit-GEMM convolution template (imported only when a kernel is generated: it needs ``triton``).

A 2-D forward convolution (cross-correlation) as a matrix product without an im2col copy: rows
``m = (n, p, q)`` of the output (``M = N * P * Q``), columns its channels ``k`` of one group, the
reduction over ``(r, s, c)``: one flat loop over the ``R * S`` filter taps times ``ceil(Cg / BK)``
channel blocks (one loop, so Triton pipelines its loads). Each step loads a ``[BM, BK]`` tile of x
(the window position of each row at tap ``(r, s)``, ``BK`` consecutive channels: x is
channels-last, so a row's channels are contiguous) and a ``[BK, BN]`` tile of w (through w's
strides: KRSC, KCRS, ...). Zero padding is a masked load (``other=0``) of the positions outside
``H x W``: no padded copy of x. The f32 accumulator is rounded to the conv's output type, then the
matmul template's epilogue steps (``_triton_matmul_src._step``: bias or any tensor add/sub/mul,
scalar ops, relu, gelu, ...) run on it, each operand read at ``n*SN + k*SK + p*SP + q*SQ``; the
result is stored ``[N, P, Q, K]`` (dense channels-last).

Grid ``(ceil(M / BM) * ceil(Kg / BN), G, 1)``: axis 1 is the group (x channels ``[g*Cg, (g+1)*Cg)``,
filters and output channels ``[g*Kg, (g+1)*Kg)``).

Every size, stride and epilogue step is a ``tl.constexpr``: a compiled kernel's parameters are only
the pointers x, w, the epilogue operands (absent ones are ``None`` constexprs and vanish) and y, then
the two scratch pointers Triton 3.6 appends. This file's text is part of the generator identity
(``triton_matmul.generator_id``): any edit changes the policy, hence every compile cache key of a
plan with generated kernels.
"""
import triton
import triton.language as tl

from hipdnn_iree.plugins.iree_linalg.kernels._triton_matmul_src import _round, _step


@triton.jit
def _epilogue(x, e_ptr, zero, n, p, q, rn, mask, CODE: tl.constexpr, SCALAR: tl.constexpr,
              SN: tl.constexpr, SK: tl.constexpr, SP: tl.constexpr, SQ: tl.constexpr, R: tl.constexpr):
    # NOTE: the operand's row offset of each output row (any broadcast over n, p, q), then the matmul
    # template's step with unit row stride
    return _step(x, e_ptr, zero, n * SN + p * SP + q * SQ, rn, mask, CODE, SCALAR, 0, 1, SK, R)


@triton.jit
def hipdnn_conv(x_ptr, w_ptr, e0_ptr, e1_ptr, e2_ptr, e3_ptr, y_ptr,
                NB: tl.constexpr, H: tl.constexpr, W: tl.constexpr, CG: tl.constexpr, KG: tl.constexpr,
                KT: tl.constexpr, R: tl.constexpr, S: tl.constexpr, P: tl.constexpr, Q: tl.constexpr,
                SXN: tl.constexpr, SXC: tl.constexpr, SXH: tl.constexpr, SXW: tl.constexpr,
                SWK: tl.constexpr, SWC: tl.constexpr, SWR: tl.constexpr, SWS: tl.constexpr,
                STH: tl.constexpr, STW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                DH: tl.constexpr, DW: tl.constexpr, HW_MASK: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                ACC_R: tl.constexpr, OUT_DT: tl.constexpr,
                C0: tl.constexpr, V0: tl.constexpr, N0: tl.constexpr, K0: tl.constexpr, P0: tl.constexpr,
                Q0: tl.constexpr, R0: tl.constexpr,
                C1: tl.constexpr, V1: tl.constexpr, N1: tl.constexpr, K1: tl.constexpr, P1: tl.constexpr,
                Q1: tl.constexpr, R1: tl.constexpr,
                C2: tl.constexpr, V2: tl.constexpr, N2: tl.constexpr, K2: tl.constexpr, P2: tl.constexpr,
                Q2: tl.constexpr, R2: tl.constexpr,
                C3: tl.constexpr, V3: tl.constexpr, N3: tl.constexpr, K3: tl.constexpr, P3: tl.constexpr,
                Q3: tl.constexpr, R3: tl.constexpr):
    M: tl.constexpr = NB * P * Q
    NCB: tl.constexpr = (CG + BK - 1) // BK     # channel blocks per filter tap
    pid = tl.program_id(0)
    gid = tl.program_id(1)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(KG, BN)
    # grouped tile order: GROUP_M row tiles share the filter tiles they read (L2 reuse)
    width = GROUP_M * num_n
    group = pid // width
    first_m = group * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % width) % size_m)
    pid_n = (pid % width) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    # NOTE: rows/filters past the edge read a valid one again (modulo) and are masked at the store
    ram = rm % M
    rbn = rn % KG
    n = ram // (P * Q)
    pq = ram % (P * Q)
    p = pq // Q
    q = pq % Q
    ih0 = p * STH - PH
    iw0 = q * STW - PW
    # NOTE: int32 offsets from the base pointers (fewer registers than 64-bit pointer tensors)
    x_row = gid * (CG * SXC) + n * SXN
    w_col = (gid * KG + rbn) * SWK
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for t in range(0, R * S * NCB):
        rs = t // NCB
        c = (t - rs * NCB) * BK + rk
        r = rs // S
        s = rs - r * S
        ih = ih0 + r * DH
        iw = iw0 + s * DW
        a_ptrs = x_ptr + ((x_row + ih * SXH + iw * SXW)[:, None] + c[None, :] * SXC)
        b_ptrs = w_ptr + (w_col[None, :] + (r * SWR + s * SWS) + c[:, None] * SWC)
        if HW_MASK:
            inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            if CG % BK == 0:
                a = tl.load(a_ptrs, mask=inside[:, None], other=0.0)
            else:
                a = tl.load(a_ptrs, mask=inside[:, None] & (c[None, :] < CG), other=0.0)
        else:
            if CG % BK == 0:
                a = tl.load(a_ptrs)
            else:
                a = tl.load(a_ptrs, mask=c[None, :] < CG, other=0.0)
        if CG % BK == 0:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=c[:, None] < CG, other=0.0)
        acc = tl.dot(a, b, acc)
    x = _round(acc, ACC_R)
    mask = (rm[:, None] < M) & (rn[None, :] < KG)
    rk_out = gid * KG + rn
    zero = gid * 0
    x = _epilogue(x, e0_ptr, zero, n, p, q, rk_out, mask, C0, V0, N0, K0, P0, Q0, R0)
    x = _epilogue(x, e1_ptr, zero, n, p, q, rk_out, mask, C1, V1, N1, K1, P1, Q1, R1)
    x = _epilogue(x, e2_ptr, zero, n, p, q, rk_out, mask, C2, V2, N2, K2, P2, Q2, R2)
    x = _epilogue(x, e3_ptr, zero, n, p, q, rk_out, mask, C3, V3, N3, K3, P3, Q3, R3)
    y_ptrs = y_ptr + rm[:, None] * KT + rk_out[None, :]
    if OUT_DT == 1:
        tl.store(y_ptrs, x.to(tl.float16), mask=mask)
    elif OUT_DT == 2:
        tl.store(y_ptrs, x.to(tl.bfloat16), mask=mask)
    else:
        tl.store(y_ptrs, x, mask=mask)
