"""Ahead-of-time Triton kernels for :class:`lowering.ops.generated_conv.ConvPattern` (conv fprop, NHWC).

:func:`generate` instantiates the implicit-GEMM template (``_triton_conv_src.py``) with the pattern's
sizes, strides, padding, stride, dilation, groups, dtypes and epilogue, compiles it for each arch in
``triton_matmul.ARCHS`` without a GPU and returns the same three variants as the matmul generator:
the sm_90a cubin (compute capability 9.x), the sm_80 cubin (8.x), the sm_80 PTX (any other device).

Block sizes (:func:`config`; NOTE: a first heuristic, not yet run or tuned on a GPU):

- ``BM`` (output rows ``(n, p, q)`` per program): 128, or 64 when ``N * P * Q < 4096``;
- ``BN`` (output channels per program): ``Kg`` rounded up to a power of two, 16 to 128;
- ``BK`` (input channels per step): ``Cg`` rounded up to a power of two, 16 to 64 (a partial block
  is a masked load);
- 8 warps for 128 x 128 tiles, else 4; 3 stages, fewer per arch while the kernel's shared memory
  exceeds ``MAX_SHARED`` (the dispatch has one size for its variants). ``BM``, ``BN`` and the warps
  are the same for every arch (one grid and one workgroup size per dispatch).

Example:
    >>> from lowering.ops.generated_conv import ConvPattern, Operand
    >>> p = ConvPattern((0,), 32, 64, 64, (56, 56), (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), 1,
    ...                 Operand(1, "bf16", (200704, 1, 3584, 64)), Operand(2, "bf16", (576, 1, 192, 64)),
    ...                 "bf16", (), 3, "bf16")
    >>> sorted(config(p).items())
    [('BK', 64), ('BM', 128), ('BN', 64), ('GROUP_M', 8), ('num_stages', 3), ('num_warps', 4)]
"""
from __future__ import annotations

import functools

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import (_ROUND, _STEP_CODES, _TL, ARCHS, MAX_SHARED,
                                                                   PINNED_TRITON, _entry_params, generator_id,
                                                                   triton_version)
from lowering.ops.generated_conv import MAX_GRID_Y, ConvPattern, GeneratedKernel


def _pow2(n: int, lo: int, hi: int) -> int:
    return min(hi, max(lo, 1 << max(0, (n - 1).bit_length())))


def config(p: ConvPattern) -> dict:
    """Tile sizes, warps and stages of ``p``'s kernel (module docstring)."""
    m = p.n * p.out_hw[0] * p.out_hw[1]
    bm = 128 if m >= 4096 else 64
    bn = _pow2(p.k // p.groups, 16, 128)
    bk = _pow2(p.c // p.groups, 16, 64)
    return dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=8 if bm * bn >= 128 * 128 else 4, num_stages=3)


def _hw_mask(p: ConvPattern) -> bool:
    """Whether some window position falls outside x (zero padding: masked loads)."""
    for size, o, r, st, pre, dil in zip(p.in_hw, p.out_hw, p.kern, p.stride, p.pre, p.dilation):
        if pre > 0 or (o - 1) * st - pre + (r - 1) * dil >= size:
            return True
    return False


def _constexprs(p: ConvPattern, cfg: dict) -> tuple[dict, dict]:
    sig = {"x_ptr": f"*{_TL[p.x.dtype]}", "w_ptr": f"*{_TL[p.w.dtype]}"}
    sx, sw = p.x.strides, p.w.strides
    const = {"NB": p.n, "H": p.in_hw[0], "W": p.in_hw[1], "CG": p.c // p.groups, "KG": p.k // p.groups, "KT": p.k,
             "R": p.kern[0], "S": p.kern[1], "P": p.out_hw[0], "Q": p.out_hw[1],
             "SXN": sx[0], "SXC": sx[1], "SXH": sx[2], "SXW": sx[3],
             "SWK": sw[0], "SWC": sw[1], "SWR": sw[2], "SWS": sw[3],
             "STH": p.stride[0], "STW": p.stride[1], "PH": p.pre[0], "PW": p.pre[1],
             "DH": p.dilation[0], "DW": p.dilation[1], "HW_MASK": _hw_mask(p),
             "BM": cfg["BM"], "BN": cfg["BN"], "BK": cfg["BK"], "GROUP_M": cfg["GROUP_M"],
             "ACC_R": _ROUND[p.acc_round], "OUT_DT": _ROUND[p.out_dtype]}
    for i in range(4):
        s = p.steps[i] if i < len(p.steps) else None
        name = f"e{i}_ptr"
        if s is not None and s.operand is not None:
            sig[name] = f"*{_TL[s.operand.dtype]}"
            strides = s.operand.strides
        else:
            const[name] = None
            strides = (0, 0, 0, 0)
        code = 0 if s is None else _STEP_CODES[(s.op, s.operand is not None) if s.op in ("add", "sub", "mul") else s.op]
        const.update({f"C{i}": code, f"V{i}": float(s.scalar) if s is not None and s.scalar is not None else 0.0,
                      f"N{i}": strides[0], f"K{i}": strides[1], f"P{i}": strides[2], f"Q{i}": strides[3],
                      f"R{i}": _ROUND[s.round_to] if s is not None else 0})
    sig["y_ptr"] = f"*{_TL[p.out_dtype]}"
    for k in const:
        sig[k] = "constexpr"
    return sig, const


def compile_kernel(p: ConvPattern, cfg: dict, cap: int):
    """``(Triton's compiled kernel, its pointer parameters' names)`` of ``p`` with block sizes ``cfg``
    for compute capability ``cap`` (90: sm_90a, 80: sm_80)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from hipdnn_iree.plugins.iree_linalg.kernels import _triton_conv_src as src
    sig, const = _constexprs(p, cfg)
    ptr_names = [n for n, t in sig.items() if t.startswith("*")]
    # NOTE: every pointer is 16-byte aligned (IREE's bindings; callers' buffers: docs/generated_kernels.md)
    attrs = {(src.hipdnn_conv.arg_names.index(n),): [["tt.divisibility", 16]] for n in ptr_names}
    ast = triton.compiler.ASTSource(fn=src.hipdnn_conv, signature=sig, constexprs=const, attrs=attrs)
    try:
        k = triton.compile(ast, target=GPUTarget("cuda", cap, 32),
                           options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    except Exception as e:   # noqa: BLE001  (Triton's own errors: reported as the engine's)
        raise HipdnnError(Status.INTERNAL_ERROR, f"Triton failed to compile the conv kernel for sm_{cap} "
                                                 f"({type(e).__name__}: {str(e)[:500]}): pattern {p.key()}") from e
    return k, ptr_names


def fitted(p: ConvPattern, cap: int):
    """``(compiled kernel, pointer names, cfg)`` for ``cap`` with the stages lowered until its shared
    memory fits ``MAX_SHARED``."""
    cfg = config(p)
    while True:
        k, ptr_names = compile_kernel(p, cfg, cap)
        if k.metadata.shared <= MAX_SHARED:
            return k, ptr_names, cfg
        if cfg["num_stages"] <= 1:
            raise HipdnnError(Status.NOT_SUPPORTED, f"generated conv kernel needs {k.metadata.shared} bytes of "
                                                    f"shared memory (> {MAX_SHARED}): pattern {p.key()}")
        cfg = dict(cfg, num_stages=cfg["num_stages"] - 1)


@functools.lru_cache(maxsize=256)
def _generate(key: str, p: ConvPattern) -> tuple:
    gen = generator_id()
    compiled = {}
    for arch, cap in ARCHS:
        compiled[arch] = fitted(p, cap)
    cfg = config(p)
    m = p.n * p.out_hw[0] * p.out_hw[1]
    grid = (-(-m // cfg["BM"]) * -(-(p.k // p.groups) // cfg["BN"]), p.groups, 1)
    out = []
    for arch, (k, ptr_names, _) in compiled.items():
        md = k.metadata
        if md.global_scratch_size or md.profile_scratch_size:
            raise HipdnnError(Status.INTERNAL_ERROR, f"Triton kernel for {arch} needs scratch memory "
                                                     f"(global {md.global_scratch_size}, profile "
                                                     f"{md.profile_scratch_size} bytes): not bound by IREE")
        want = len(ptr_names) + 2   # x, w, epilogue operands, y + Triton's two scratch pointers
        got = _entry_params(k.asm["ptx"], md.name)
        if got != want:
            raise HipdnnError(Status.INTERNAL_ERROR, f"Triton kernel {md.name} ({arch}) has {got} parameters, "
                                                     f"expected {want} (pointers + 2 scratch)")
        out.append(GeneratedKernel(md.name, arch, "cubin", bytes(k.asm["cubin"]), md.num_warps * 32, grid,
                                   md.shared, gen))
    last = compiled[ARCHS[-1][0]][0]
    out.append(GeneratedKernel(last.metadata.name, ARCHS[-1][0], "ptx", last.asm["ptx"].encode() + b"\0",
                               last.metadata.num_warps * 32, grid, last.metadata.shared, gen))
    return tuple(out)


def generate(p: ConvPattern, target: str = "") -> tuple:
    """The variants of ``p``'s kernel (``GeneratedKernel``s; memoized per pattern and generator) for a
    CUDA plan (``target`` "" or ``"cuda:..."``).

    Raises:
        HipdnnError: NOT_SUPPORTED without Triton, for a ROCm target (the conv template is CUDA only:
            ``build.generated_kernels`` does not ask), past CUDA's grid or the shared-memory limit;
            INTERNAL_ERROR when Triton's output breaks the ABI the dispatch declares.
    """
    if target and not str(target).startswith("cuda"):
        raise HipdnnError(Status.NOT_SUPPORTED, f"generated conv kernels are CUDA only, not {target}")
    if triton_version() is None:
        raise HipdnnError(Status.NOT_SUPPORTED, "GPU_KERNELS=GENERATED needs Triton to build a plan "
                                                f"(pip install 'hipdnn-iree[gpu]', triton=={PINNED_TRITON}); "
                                                "restoring a plan does not")
    if p.groups > MAX_GRID_Y:
        raise HipdnnError(Status.NOT_SUPPORTED, f"generated conv kernel: {p.groups} groups exceed CUDA's grid "
                                                f"limit {MAX_GRID_Y}")
    return _generate(p.key() + generator_id(), p)
