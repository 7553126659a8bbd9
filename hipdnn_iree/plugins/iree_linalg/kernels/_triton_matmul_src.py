"""The Triton matmul template (imported only when a kernel is generated: it needs ``triton``).

Every size, stride, dtype and epilogue step is a ``tl.constexpr``, so a compiled kernel's parameters
are only the pointers of the tensors it reads and writes (absent epilogue operands are ``None``
constexprs and vanish from the signature), then the two scratch pointers Triton 3.6 appends.
This file's text is part of the generator identity (``triton_matmul.generator_id``): any edit
changes the policy, hence every compile cache key of a plan with generated kernels.
"""
import triton
import triton.language as tl

# epilogue step codes (triton_matmul._STEP_CODES)
_ADD_T, _SUB_T, _MUL_T, _ADD_S, _SUB_S, _MUL_S = 1, 2, 3, 4, 5, 6
_RELU, _GELU, _GELU_TANH, _TANH, _SIGMOID, _IDENTITY = 10, 11, 12, 13, 14, 15


@triton.jit
def _round(x, R: tl.constexpr):
    # NOTE: the IREE lowering stores each intermediate tensor in its declared type: 1 f16, 2 bf16
    if R == 1:
        x = x.to(tl.float16).to(tl.float32)
    elif R == 2:
        x = x.to(tl.bfloat16).to(tl.float32)
    return x


@triton.jit
def _step(x, e_ptr, bid, rm, rn, mask, CODE: tl.constexpr, SCALAR: tl.constexpr,
          SB: tl.constexpr, SR: tl.constexpr, SC: tl.constexpr, R: tl.constexpr):
    if CODE == 1 or CODE == 2 or CODE == 3:
        y = tl.load(e_ptr + bid.to(tl.int64) * SB + rm[:, None] * SR + rn[None, :] * SC, mask=mask,
                    other=0.0).to(tl.float32)
        if CODE == 1:
            x = x + y
        elif CODE == 2:
            x = x - y
        else:
            x = x * y
    elif CODE == 4:
        x = x + SCALAR
    elif CODE == 5:
        x = x - SCALAR
    elif CODE == 6:
        x = x * SCALAR
    elif CODE == 10:
        x = tl.maximum(x, 0.0)
    elif CODE == 11:
        x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif CODE == 12:
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        x = 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))
    elif CODE == 13:
        x = 2.0 * tl.sigmoid(2.0 * x) - 1.0
    elif CODE == 14:
        x = tl.sigmoid(x)
    if CODE != 0:
        x = _round(x, R)
    return x


@triton.jit
def hipdnn_matmul(a_ptr, b_ptr, e0_ptr, e1_ptr, e2_ptr, e3_ptr, c_ptr,
                  M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                  SAB: tl.constexpr, SAM: tl.constexpr, SAK: tl.constexpr,
                  SBB: tl.constexpr, SBK: tl.constexpr, SBN: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                  IEEE: tl.constexpr, ACC_R: tl.constexpr, OUT_DT: tl.constexpr,
                  C0: tl.constexpr, V0: tl.constexpr, B0: tl.constexpr, M0: tl.constexpr, N0: tl.constexpr,
                  R0: tl.constexpr,
                  C1: tl.constexpr, V1: tl.constexpr, B1: tl.constexpr, M1: tl.constexpr, N1: tl.constexpr,
                  R1: tl.constexpr,
                  C2: tl.constexpr, V2: tl.constexpr, B2: tl.constexpr, M2: tl.constexpr, N2: tl.constexpr,
                  R2: tl.constexpr,
                  C3: tl.constexpr, V3: tl.constexpr, B3: tl.constexpr, M3: tl.constexpr, N3: tl.constexpr,
                  R3: tl.constexpr):
    pid = tl.program_id(0)
    bid = tl.program_id(1)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    # grouped tile order: GROUP_M row tiles share the column tiles they read (L2 reuse)
    width = GROUP_M * num_n
    group = pid // width
    first_m = group * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % width) % size_m)
    pid_n = (pid % width) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    # NOTE: rows/cols past the edge read a valid row/col again (modulo) and are masked at the store
    ram = tl.max_contiguous(tl.multiple_of(rm % M, BM), BM) if M % BM == 0 else rm % M
    rbn = tl.max_contiguous(tl.multiple_of(rn % N, BN), BN) if N % BN == 0 else rn % N
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + bid.to(tl.int64) * SAB + ram[:, None] * SAM + rk[None, :] * SAK
    b_ptrs = b_ptr + bid.to(tl.int64) * SBB + rk[:, None] * SBK + rbn[None, :] * SBN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BK)):
        if K % BK == 0:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=rk[None, :] < K - kk * BK, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < K - kk * BK, other=0.0)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BK * SAK
        b_ptrs += BK * SBK
    x = _round(acc, ACC_R)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = _step(x, e0_ptr, bid, rm, rn, mask, C0, V0, B0, M0, N0, R0)
    x = _step(x, e1_ptr, bid, rm, rn, mask, C1, V1, B1, M1, N1, R1)
    x = _step(x, e2_ptr, bid, rm, rn, mask, C2, V2, B2, M2, N2, R2)
    x = _step(x, e3_ptr, bid, rm, rn, mask, C3, V3, B3, M3, N3, R3)
    c_ptrs = c_ptr + bid.to(tl.int64) * (M * N) + rm[:, None] * N + rn[None, :]
    if OUT_DT == 1:
        tl.store(c_ptrs, x.to(tl.float16), mask=mask)
    elif OUT_DT == 2:
        tl.store(c_ptrs, x.to(tl.bfloat16), mask=mask)
    else:
        tl.store(c_ptrs, x, mask=mask)
