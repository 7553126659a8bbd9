"""Ahead-of-time Triton kernels for :class:`lowering.ops.generated_matmul.MatmulPattern`.

:func:`generate` instantiates the template (``_triton_matmul_src.py``) with the pattern's sizes,
strides, dtypes and epilogue, compiles it for each arch in :data:`ARCHS` without a GPU
(``triton.compile(ASTSource(...), target=GPUTarget("cuda", cap, 32))``) and returns the variants
the module carries, in the order the runtime tries them: the sm_90a cubin (picked on compute
capability 9.x), the sm_80 cubin (8.x), the sm_80 PTX (any other device: the driver JIT-compiles it).
For a ``rocm:gfx942`` / ``rocm:gfx950`` plan it returns one HSACO for that arch instead
(:func:`config_rocm`, ``triton_rocm.compile_hip``: static LDS for IREE's HIP launch; never run on an AMD GPU).

Example:
    >>> generator_id().startswith("triton-") or generator_id() == ""
    True
"""
from __future__ import annotations

import functools
import hashlib
import os
from importlib import metadata

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from lowering.ops.generated_matmul import GeneratedKernel, MatmulPattern

# NOTE: the GPU machine's Triton (driver 580, CUDA 13.0); its ptxas emits PTX 8.7 / cubins that load
# there. pyproject.toml pins it in the `gpu` and `test` extras; another version builds, but says so
# in the generator identity (and so in every cache key).
PINNED_TRITON = "3.6.0"
# (arch tag, Triton compute capability): every kernel is compiled for each
ARCHS = (("sm_90a", 90), ("sm_80", 80))
# NOTE: one dispatch has one workgroup_local_memory for all its variants; the sm_80 cubin/PTX also
# serves sm_86/sm_89, whose opt-in maximum per block is 99 KB (101376 bytes)
MAX_SHARED = 101376
_STEP_CODES = {("add", True): 1, ("sub", True): 2, ("mul", True): 3, ("add", False): 4, ("sub", False): 5,
               ("mul", False): 6, "relu": 10, "gelu": 11, "gelu_tanh": 12, "tanh": 13, "sigmoid": 14,
               "identity": 15}
_ROUND = {"f32": 0, "f16": 1, "bf16": 2}
_TL = {"f16": "fp16", "bf16": "bf16", "f32": "fp32"}
_HERE = os.path.dirname(os.path.abspath(__file__))
# every template and driver of this package: their text is the generator identity (generator_id)
SOURCES = ("_triton_matmul_src.py", "triton_matmul.py", "_triton_sdpa_src.py", "triton_sdpa.py", "triton_rocm.py",
           "hsaco.py", "_triton_conv_src.py", "triton_conv.py")


def triton_version() -> str | None:
    """The installed Triton's version (read from its metadata: ``triton`` is not imported), or None."""
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def _source_digest() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        with open(os.path.join(_HERE, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def generator_id(arch: str | None = None) -> str:
    """``"triton-<version>:<digest of every template and driver (SOURCES)>"`` for the CUDA archs
    (:data:`ARCHS`), with ``":hip-<arch>"`` appended for an AMD ``arch`` (``triton_rocm.ROCM_ARCHS``);
    "" without Triton."""
    v = triton_version()
    if not v:
        return ""
    return f"triton-{v}:{_source_digest()}" + (f":hip-{arch}" if arch else "")


def config(p: MatmulPattern) -> dict:
    """Tile sizes, warps and stages for ``p`` (one config for every arch: the dispatch has one
    workgroup size). NOTE: a first heuristic, not yet tuned on a GPU (docs/generated_kernels.md)."""
    sixteen = p.a.dtype in ("f16", "bf16")
    if not sixteen:
        return dict(BM=64, BN=64, BK=32, GROUP_M=8, num_warps=4, num_stages=3)
    if p.m >= 128 and p.n >= 128:
        return dict(BM=128, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=3)
    return dict(BM=64, BN=64, BK=64, GROUP_M=8, num_warps=4, num_stages=3)


def _constexprs(p: MatmulPattern, cfg: dict) -> tuple[dict, dict]:
    sig = {"a_ptr": f"*{_TL[p.a.dtype]}", "b_ptr": f"*{_TL[p.b.dtype]}"}
    const = {"M": p.m, "N": p.n, "K": p.k, "SAB": p.a.strides[0], "SAM": p.a.strides[1], "SAK": p.a.strides[2],
             "SBB": p.b.strides[0], "SBK": p.b.strides[1], "SBN": p.b.strides[2],
             "BM": cfg["BM"], "BN": cfg["BN"], "BK": cfg["BK"], "GROUP_M": cfg["GROUP_M"],
             "IEEE": p.a.dtype == "f32", "ACC_R": _ROUND[p.acc_round], "OUT_DT": _ROUND[p.out_dtype]}
    for i in range(4):
        s = p.steps[i] if i < len(p.steps) else None
        name = f"e{i}_ptr"
        if s is not None and s.operand is not None:
            sig[name] = f"*{_TL[s.operand.dtype]}"
            strides = s.operand.strides
        else:
            const[name] = None
            strides = (0, 0, 0)
        code = 0 if s is None else _STEP_CODES[(s.op, s.operand is not None) if s.op in ("add", "sub", "mul") else s.op]
        const.update({f"C{i}": code, f"V{i}": float(s.scalar) if s is not None and s.scalar is not None else 0.0,
                      f"B{i}": strides[0], f"M{i}": strides[1], f"N{i}": strides[2],
                      f"R{i}": _ROUND[s.round_to] if s is not None else 0})
    sig["c_ptr"] = f"*{_TL[p.out_dtype]}"
    for k in const:
        sig[k] = "constexpr"
    return sig, const


def _entry_params(ptx: str, name: str) -> int:
    """How many parameters the PTX ``.entry name(...)`` declares."""
    at = ptx.index(f".entry {name}(")
    return ptx[at:ptx.index(")", at)].count(".param")


@functools.lru_cache(maxsize=256)
def _generate(key: str, p: MatmulPattern) -> tuple:
    import triton
    from triton.backends.compiler import GPUTarget
    from hipdnn_iree.plugins.iree_linalg.kernels import _triton_matmul_src as src
    cfg = config(p)
    sig, const = _constexprs(p, cfg)
    # NOTE: every pointer is 16-byte aligned (IREE's bindings; callers' buffers: docs/generated_kernels.md)
    ptr_names = [n for n, t in sig.items() if t.startswith("*")]
    attrs = {(src.hipdnn_matmul.arg_names.index(n),): [["tt.divisibility", 16]] for n in ptr_names}
    gen = generator_id()
    out = []
    stages = cfg["num_stages"]
    while True:
        compiled = {}
        for arch, cap in ARCHS:
            ast = triton.compiler.ASTSource(fn=src.hipdnn_matmul, signature=sig, constexprs=const, attrs=attrs)
            compiled[arch] = triton.compile(ast, target=GPUTarget("cuda", cap, 32),
                                            options={"num_warps": cfg["num_warps"], "num_stages": stages})
        shared = max(k.metadata.shared for k in compiled.values())
        if shared <= MAX_SHARED or stages <= 1:
            break
        stages -= 1
    if shared > MAX_SHARED:
        raise HipdnnError(Status.NOT_SUPPORTED, f"generated matmul kernel needs {shared} bytes of shared memory "
                                                f"(> {MAX_SHARED}): pattern {key}")
    grid = (-(-p.m // cfg["BM"]) * -(-p.n // cfg["BN"]), p.batch, 1)
    for arch, k in compiled.items():
        md = k.metadata
        if md.global_scratch_size or md.profile_scratch_size:
            raise HipdnnError(Status.INTERNAL_ERROR, f"Triton kernel for {arch} needs scratch memory "
                                                     f"(global {md.global_scratch_size}, profile "
                                                     f"{md.profile_scratch_size} bytes): not bound by IREE")
        want = len(ptr_names) + 2   # declared pointers (c included) + Triton's two scratch pointers
        got = _entry_params(k.asm["ptx"], md.name)
        if got != want:
            raise HipdnnError(Status.INTERNAL_ERROR, f"Triton kernel {md.name} ({arch}) has {got} parameters, "
                                                     f"expected {want} (pointers + 2 scratch)")
        block = md.num_warps * 32
        out.append(GeneratedKernel(md.name, arch, "cubin", bytes(k.asm["cubin"]), block, grid, md.shared, gen))
    last = compiled[ARCHS[-1][0]]
    out.append(GeneratedKernel(last.metadata.name, ARCHS[-1][0], "ptx", last.asm["ptx"].encode() + b"\0",
                               last.metadata.num_warps * 32, grid, last.metadata.shared, gen))
    return tuple(out)


def config_rocm(p: MatmulPattern) -> dict:
    """The ROCm config: :func:`config`'s tiles and warps (``num_warps * 64`` threads) with 2 stages,
    Triton's AMD default (one LDS buffer per operand tile: 32 KiB at 128x128x64 f16, half the 64 KiB
    of gfx942). NOTE: a conservative first choice, never run or timed on an AMD GPU."""
    return dict(config(p), num_stages=2)


@functools.lru_cache(maxsize=256)
def _generate_rocm(key: str, p: MatmulPattern, arch: str) -> tuple:
    from hipdnn_iree.plugins.iree_linalg.kernels import _triton_matmul_src as src
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_rocm import ROCM_ARCHS, compile_hip
    cfg = config_rocm(p)
    sig, const = _constexprs(p, cfg)
    ptr_names = [n for n, t in sig.items() if t.startswith("*")]
    attrs = {(src.hipdnn_matmul.arg_names.index(n),): [["tt.divisibility", 16]] for n in ptr_names}
    stages = cfg["num_stages"]
    while True:
        k = compile_hip(src.hipdnn_matmul, sig, const, attrs, arch, cfg["num_warps"], stages, len(ptr_names))
        if k.shared <= ROCM_ARCHS[arch] or stages <= 1:
            break
        stages -= 1
    if k.shared > ROCM_ARCHS[arch]:
        raise HipdnnError(Status.NOT_SUPPORTED, f"generated matmul kernel needs {k.shared} bytes of LDS "
                                                f"(> {ROCM_ARCHS[arch]} on {arch}): pattern {key}")
    grid = (-(-p.m // cfg["BM"]) * -(-p.n // cfg["BN"]), p.batch, 1)
    return (GeneratedKernel(k.name, arch, "hsaco", k.image, k.block, grid, k.shared, generator_id(arch)),)


def generate(p: MatmulPattern, target: str = "") -> tuple:
    """The variants of ``p``'s kernel (``GeneratedKernel``s; memoized per pattern and generator): for
    a ``rocm:<gfx>`` ``target`` of ``triton_rocm.ROCM_ARCHS`` one HSACO for that arch, otherwise the
    CUDA variants.

    Raises:
        HipdnnError: NOT_SUPPORTED without Triton; INTERNAL_ERROR when Triton's output breaks the
            ABI the dispatch declares (scratch memory, parameter count).
    """
    if triton_version() is None:
        raise HipdnnError(Status.NOT_SUPPORTED, "GPU_KERNELS=GENERATED needs Triton to build a plan "
                                                f"(pip install 'hipdnn-iree[gpu]', triton=={PINNED_TRITON}); "
                                                "restoring a plan does not")
    key = p.key()
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_rocm import rocm_arch
    arch = rocm_arch(target)
    if arch is not None:
        return _generate_rocm(key + generator_id(arch), p, arch)
    return _generate(key + generator_id(), p)
