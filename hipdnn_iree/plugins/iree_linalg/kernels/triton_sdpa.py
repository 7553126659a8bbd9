"""Ahead-of-time Triton kernels for :class:`lowering.ops.generated_sdpa.SdpaPattern` (attention forward).

:func:`generate` instantiates the flash-attention template (``_triton_sdpa_src.py``) with the
pattern's sizes, strides, scale, causal flag and dtypes, compiles it for each arch in
``triton_matmul.ARCHS`` without a GPU and returns the same three variants as the matmul generator:
the sm_90a cubin (compute capability 9.x), the sm_80 cubin (8.x), the sm_80 PTX (any other device).

Block sizes (:func:`config`; NOTE: a first heuristic, not yet run or tuned on a GPU):

- ``BM`` (query rows per program): 128, or 64 when ``Sq <= 64``. It fixes the grid
  ``(ceil(Sq / BM), B * Hq, 1)``, and ``num_warps`` the workgroup size, so both are the same for
  every variant of the dispatch (one ``workgroup_size``, one count region).
- ``BN`` (keys per step): 64; ``num_warps``: 8 (4 with ``BM`` 64); ``num_stages``: 3. Checked with
  Triton 3.6's ptxas (``ptxas -v``) on the CPU for bf16, causal and not, D = 64 and 128: no register
  spills on sm_90a (108-177 registers, wgmma) nor sm_80 (140-216); 4 warps spilled at D = 128, ``BN``
  128 (2 stages) spilled 32-44 bytes on sm_80 at D = 128 (docs/generated_kernels.md).
- The head dims are padded to the next power of two (``BD``, ``BDV``: 16..128) with masked loads
  when they are not one (D = 48, 80, 96, 112).
- Shared memory: the dispatch declares the largest of its variants, which must stay within
  ``MAX_SHARED`` (101376 bytes, what the sm_80 binary may ask for on sm_86/sm_89): ``num_stages``
  drops (then ``BN`` halves) per arch until it does (sm_90a at D = 128: 128 KiB at 3 stages, 96 KiB
  at 2; sm_80: 96 KiB at 3).

Example:
    >>> from lowering.ops.generated_sdpa import Operand, SdpaPattern
    >>> p = SdpaPattern(0, 1, 8, 8, 8, 1024, 1024, 128, 128, Operand(1, "bf16", (0, 0, 0, 1)),
    ...                 Operand(2, "bf16", (0, 0, 0, 1)), Operand(3, "bf16", (0, 0, 0, 1)), 0.1, True,
    ...                 4, "bf16", (0, 1, 2, 3))
    >>> sorted(config(p, "sm_80").items())
    [('BM', 128), ('BN', 64), ('num_stages', 3), ('num_warps', 8)]
"""
from __future__ import annotations

import functools
import math

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import (ARCHS, MAX_SHARED, PINNED_TRITON, _TL,
                                                                   _entry_params, generator_id, triton_version)
from lowering.ops.generated_sdpa import MAX_GRID_Y, GeneratedKernel, SdpaPattern

_OUT = {"f32": 0, "f16": 1, "bf16": 2}


def _pow2(n: int) -> int:
    return 1 << max(4, (n - 1).bit_length())


def config(p: SdpaPattern, arch: str) -> dict:
    """Block sizes, warps and stages of ``p``'s kernel for ``arch`` (module docstring). ``BM`` and
    ``num_warps`` must not depend on ``arch`` (one grid and workgroup size per dispatch)."""
    bm = 128 if p.sq > 64 else 64
    return dict(BM=bm, BN=64, num_warps=8 if bm == 128 else 4, num_stages=3)


def _constexprs(p: SdpaPattern, cfg: dict) -> tuple[dict, dict]:
    sig = {"q_ptr": f"*{_TL[p.q.dtype]}", "k_ptr": f"*{_TL[p.k.dtype]}", "v_ptr": f"*{_TL[p.v.dtype]}",
           "o_ptr": f"*{_TL[p.o_dtype]}"}
    const = {}
    if p.stats:
        sig["lse_ptr"] = "*fp32"
    else:
        const["lse_ptr"] = None
    const.update({"HQ": p.hq, "SQ": p.sq, "SKV": p.skv, "D": p.d, "DV": p.dv, "GK": p.hq // p.hk,
                  "GV": p.hq // p.hv})
    for name, st in (("Q", p.q.strides), ("K", p.k.strides), ("V", p.v.strides), ("O", p.o_strides)):
        const.update({f"S{name}B": st[0], f"S{name}H": st[1], f"S{name}S": st[2], f"S{name}D": st[3]})
    const.update({"QK_SCALE": float(p.scale) * math.log2(math.e), "CAUSAL": bool(p.causal), "STATS": p.stats,
                  "OUT_DT": _OUT[p.o_dtype], "BM": cfg["BM"], "BN": cfg["BN"], "BD": _pow2(p.d),
                  "BDV": _pow2(p.dv)})
    for k in const:
        sig[k] = "constexpr"
    return sig, const


def compile_kernel(p: SdpaPattern, cfg: dict, cap: int):
    """``(Triton's compiled kernel, its pointer parameters' names)`` of ``p`` with block sizes ``cfg``
    for compute capability ``cap`` (90: sm_90a, 80: sm_80)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from hipdnn_iree.plugins.iree_linalg.kernels import _triton_sdpa_src as src
    sig, const = _constexprs(p, cfg)
    ptr_names = [n for n, t in sig.items() if t.startswith("*")]
    # NOTE: every pointer is 16-byte aligned (IREE's bindings; callers' buffers: docs/generated_kernels.md)
    attrs = {(src.hipdnn_sdpa.arg_names.index(n),): [["tt.divisibility", 16]] for n in ptr_names}
    ast = triton.compiler.ASTSource(fn=src.hipdnn_sdpa, signature=sig, constexprs=const, attrs=attrs)
    return triton.compile(ast, target=GPUTarget("cuda", cap, 32),
                          options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}), ptr_names


@functools.lru_cache(maxsize=256)
def _generate(key: str, p: SdpaPattern) -> tuple:
    gen = generator_id()
    compiled, cfgs = {}, {}
    for arch, cap in ARCHS:
        cfg = config(p, arch)
        while True:
            k, ptr_names = compile_kernel(p, cfg, cap)
            if k.metadata.shared <= MAX_SHARED:
                break
            if cfg["num_stages"] > 1:
                cfg = dict(cfg, num_stages=cfg["num_stages"] - 1)
            elif cfg["BN"] > 16:
                cfg = dict(cfg, BN=cfg["BN"] // 2, num_stages=2)
            else:
                raise HipdnnError(Status.NOT_SUPPORTED, f"generated sdpa kernel needs {k.metadata.shared} bytes of "
                                                        f"shared memory (> {MAX_SHARED}) on {arch}: pattern {key}")
        compiled[arch], cfgs[arch] = k, cfg
    bm = cfgs[ARCHS[0][0]]["BM"]
    grid = (-(-p.sq // bm), p.b * p.hq, 1)
    out = []
    for arch, k in compiled.items():
        md = k.metadata
        if md.global_scratch_size or md.profile_scratch_size:
            raise HipdnnError(Status.INTERNAL_ERROR, f"Triton kernel for {arch} needs scratch memory "
                                                     f"(global {md.global_scratch_size}, profile "
                                                     f"{md.profile_scratch_size} bytes): not bound by IREE")
        want = len(ptr_names) + 2   # q, k, v, o (lse) + Triton's two scratch pointers
        got = _entry_params(k.asm["ptx"], md.name)
        if got != want:
            raise HipdnnError(Status.INTERNAL_ERROR, f"Triton kernel {md.name} ({arch}) has {got} parameters, "
                                                     f"expected {want} (pointers + 2 scratch)")
        out.append(GeneratedKernel(md.name, arch, "cubin", bytes(k.asm["cubin"]), md.num_warps * 32, grid,
                                   md.shared, gen))
    last = compiled[ARCHS[-1][0]]
    out.append(GeneratedKernel(last.metadata.name, ARCHS[-1][0], "ptx", last.asm["ptx"].encode() + b"\0",
                               last.metadata.num_warps * 32, grid, last.metadata.shared, gen))
    return tuple(out)


def config_rocm(p: SdpaPattern) -> dict:
    """The ROCm config: :func:`config`'s blocks and warps (``num_warps * 64`` threads) with 2 stages,
    Triton's AMD default; like CUDA's, stages then ``BN`` drop until the LDS fits the arch. NOTE: a
    conservative first choice, never run or timed on an AMD GPU."""
    return dict(config(p, "rocm"), num_stages=2)


@functools.lru_cache(maxsize=256)
def _generate_rocm(key: str, p: SdpaPattern, arch: str) -> tuple:
    from hipdnn_iree.plugins.iree_linalg.kernels import _triton_sdpa_src as src
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_rocm import ROCM_ARCHS, compile_hip
    cfg = config_rocm(p)
    while True:
        sig, const = _constexprs(p, cfg)
        ptr_names = [n for n, t in sig.items() if t.startswith("*")]
        attrs = {(src.hipdnn_sdpa.arg_names.index(n),): [["tt.divisibility", 16]] for n in ptr_names}
        k = compile_hip(src.hipdnn_sdpa, sig, const, attrs, arch, cfg["num_warps"], cfg["num_stages"],
                        len(ptr_names))
        if k.shared <= ROCM_ARCHS[arch]:
            break
        if cfg["num_stages"] > 1:
            cfg = dict(cfg, num_stages=cfg["num_stages"] - 1)
        elif cfg["BN"] > 16:
            cfg = dict(cfg, BN=cfg["BN"] // 2, num_stages=2)
        else:
            raise HipdnnError(Status.NOT_SUPPORTED, f"generated sdpa kernel needs {k.shared} bytes of LDS "
                                                    f"(> {ROCM_ARCHS[arch]}) on {arch}: pattern {key}")
    grid = (-(-p.sq // cfg["BM"]), p.b * p.hq, 1)
    return (GeneratedKernel(k.name, arch, "hsaco", k.image, k.block, grid, k.shared, generator_id(arch)),)


def generate(p: SdpaPattern, target: str = "") -> tuple:
    """The variants of ``p``'s kernel (``GeneratedKernel``s; memoized per pattern and generator): for
    a ``rocm:<gfx>`` ``target`` of ``triton_rocm.ROCM_ARCHS`` one HSACO for that arch, otherwise the
    CUDA variants.

    Raises:
        HipdnnError: NOT_SUPPORTED without Triton, or past CUDA's grid or the shared-memory limit;
            INTERNAL_ERROR when Triton's output breaks the ABI the dispatch declares.
    """
    if triton_version() is None:
        raise HipdnnError(Status.NOT_SUPPORTED, "GPU_KERNELS=GENERATED needs Triton to build a plan "
                                                f"(pip install 'hipdnn-iree[gpu]', triton=={PINNED_TRITON}); "
                                                "restoring a plan does not")
    if p.b * p.hq > MAX_GRID_Y:
        raise HipdnnError(Status.NOT_SUPPORTED, f"generated sdpa kernel: B * Hq = {p.b * p.hq} programs per "
                                                f"query tile exceed CUDA's grid limit {MAX_GRID_Y}")
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_rocm import rocm_arch
    arch = rocm_arch(target)
    if arch is not None:
        return _generate_rocm(p.key() + generator_id(arch), p, arch)
    return _generate(p.key() + generator_id(), p)
