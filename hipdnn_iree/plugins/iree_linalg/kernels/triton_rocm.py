"""Triton kernels for AMD GPUs (gfx942, gfx950) in the form IREE's HIP driver launches: static LDS.

``triton.compile(..., target=GPUTarget("hip", arch, 64))`` gives an HSACO whose shared memory is an
external zero-sized LDS array (``@global_smem = external addrspace(3) global [0 x i8]``), i.e. dynamic
LDS that the launcher must size at every launch (``hipModuleLaunchKernel``'s ``sharedMemBytes``). IREE
3.13's HIP driver launches every kernel with ``sharedMemBytes = 0`` and its ROCm target drops the
dispatch's ``workgroup_local_memory`` (``runtime/src/iree/hal/drivers/hip/stream_command_buffer.c``,
``compiler/plugins/target/ROCM/ROCMTarget.cpp``). :func:`compile_hip` therefore takes Triton's final
LLVM IR (``asm["llir"]``), gives that array a fixed size of ``metadata.shared`` bytes (an internal
LDS global: static LDS, counted in the kernel's group segment) and rebuilds the amdgcn and the HSACO
with Triton's own AMD backend steps (``HIPBackend.make_amdgcn``, ``make_hsaco``: LLVM's AMDGPU
codegen, ``assemble_amdgcn``, ``link_hsaco``) and the options ``triton.compile`` used. The code
object is then read back (:mod:`hsaco`) and refused unless it is what the dispatch declares: arch,
entry name, wavefront 64, group segment == ``metadata.shared`` with no runtime-sized LDS symbol,
a workgroup of ``num_warps * 64`` allowed, and explicit kernel arguments that are exactly the
dispatch's bindings as 8-byte global pointers at offsets 0, 8, 16... (IREE's HIP driver passes one
device pointer per binding, then 32-bit constants; these kernels take none).

Nothing here has run on an AMD GPU (docs/generated_kernels.md, ROCm section).

Example:
    >>> rocm_arch("rocm:gfx942"), rocm_arch("rocm:gfx1100"), rocm_arch("cuda:sm_80")
    ('gfx942', None, None)
    >>> static_lds("@global_smem = external addrspace(3) global [0 x i8], align 16\\n", 1024)
    '@global_smem = internal addrspace(3) global [1024 x i8] undef, align 16\\n'
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

# arch -> LDS bytes one workgroup may use (CDNA3 MI300: 64 KiB; CDNA4 MI350: 160 KiB)
ROCM_ARCHS = {"gfx942": 65536, "gfx950": 163840}
WAVE = 64   # CDNA wavefront size (Triton's warp on these archs)
_SMEM = re.compile(r"^@global_smem = external (local_unnamed_addr )?addrspace\(3\) global \[0 x i8\], align (\d+)$",
                   re.M)
_EXTERN_LDS = re.compile(r"^@\S+ = external [^\n]*addrspace\(3\)", re.M)


def rocm_arch(target: str) -> str | None:
    """The arch of a ``rocm:<gfx>`` target when the generator supports it (:data:`ROCM_ARCHS`), else None."""
    backend, _, arch = str(target).partition(":")
    return arch if backend == "rocm" and arch in ROCM_ARCHS else None


def static_lds(llir: str, shared: int) -> str:
    """``llir`` with Triton's dynamic LDS array made a static one of ``shared`` bytes.

    Raises:
        HipdnnError: INTERNAL_ERROR when the IR declares LDS in a form this does not know.
    """
    found = _SMEM.findall(llir)
    if len(found) > 1 or len(_EXTERN_LDS.findall(llir)) != len(found):
        raise HipdnnError(Status.INTERNAL_ERROR, "Triton's AMD kernel declares external LDS other than one "
                                                 "@global_smem: cannot make it static for IREE's HIP launch")
    if not found:
        return llir
    if shared <= 0:
        if llir.count("@global_smem") != 1:
            raise HipdnnError(Status.INTERNAL_ERROR, "Triton's AMD kernel reads @global_smem with metadata.shared 0")
        return _SMEM.sub("", llir)
    return _SMEM.sub(lambda m: f"@global_smem = internal {m.group(1) or ''}addrspace(3) global [{shared} x i8] "
                               f"undef, align {m.group(2)}", llir)


@dataclass(frozen=True)
class HipKernel:
    """An HSACO built for IREE's HIP launch: ``image`` its bytes, ``shared`` its (static) LDS bytes,
    ``block`` its workgroup size (``num_warps * 64``), ``info`` the code object's metadata (:mod:`hsaco`)."""

    name: str
    arch: str
    image: bytes
    shared: int
    block: int
    info: dict


def compile_hip(fn, sig: dict, const: dict, attrs: dict, arch: str, num_warps: int, num_stages: int,
                n_ptrs: int) -> HipKernel:
    """Compiles ``fn`` for ``arch`` with Triton, rebuilt with static LDS and checked (module docstring).
    ``n_ptrs``: the pointer parameters the template declares (Triton appends its two scratch pointers).

    Raises:
        HipdnnError: INTERNAL_ERROR when the code object is not what the dispatch declares.
    """
    import triton
    from triton._C.libtriton import llvm
    from triton.backends.amd.compiler import HIPBackend
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    target = GPUTarget("hip", arch, WAVE)
    opts = {"num_warps": num_warps, "num_stages": num_stages}
    ck = triton.compile(triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs),
                        target=target, options=opts)
    md = ck.metadata
    if getattr(md, "global_scratch_size", 0) or getattr(md, "profile_scratch_size", 0):
        raise HipdnnError(Status.INTERNAL_ERROR, f"Triton kernel for {arch} needs scratch memory: not bound by IREE")
    options = make_backend(target).parse_options(opts)   # what triton.compile used
    llvm.init_targets()   # NOTE: a cache hit in triton.compile skips make_llir, which initializes LLVM
    meta: dict = {}
    amdgcn = HIPBackend.make_amdgcn(static_lds(ck.asm["llir"], md.shared), meta, options)
    image = bytes(HIPBackend.make_hsaco(amdgcn, meta, options))
    block = md.num_warps * WAVE
    info = check_hsaco(image, arch, md.name, md.shared, block, n_ptrs + 2)
    return HipKernel(md.name, arch, image, md.shared, block, info)


def check_hsaco(image: bytes, arch: str, name: str, shared: int, block: int, n_args: int) -> dict:
    """The code object's metadata for kernel ``name`` (:func:`hsaco.read_hsaco`), after checking it
    against what the dispatch declares (module docstring).

    Raises:
        HipdnnError: INTERNAL_ERROR naming the first mismatch.
    """
    from hipdnn_iree.plugins.iree_linalg.kernels.hsaco import MACH, read_hsaco
    try:
        co = read_hsaco(image)
    except ValueError as e:
        raise HipdnnError(Status.INTERNAL_ERROR, f"generated {arch} kernel {name}: unreadable code object: {e}") \
            from None
    k = co["kernels"].get(name)
    explicit = [a for a in (k or {}).get("args", []) if not str(a.get("value_kind", "")).startswith("hidden_")]
    problems = [
        (co["target"].split("--")[-1].split(":")[0] == arch, f"target {co['target']!r}"),
        (co["mach"] == MACH.get(arch), f"EF_AMDGPU_MACH 0x{co['mach']:x}"),
        (k is not None, f"kernels {sorted(co['kernels'])}"),
    ]
    if k is not None:
        desc = k.get("descriptor", {})
        problems += [
            (k.get("wavefront_size") == WAVE, f"wavefront size {k.get('wavefront_size')}"),
            (k.get("group_segment_fixed_size") == shared == desc.get("group_segment_fixed_size"),
             f"group segment {k.get('group_segment_fixed_size')} (descriptor {desc.get('group_segment_fixed_size')}),"
             f" Triton's shared {shared}"),
            (not co["lds_symbols"], f"runtime-sized LDS symbols {co['lds_symbols']}"),
            (shared <= ROCM_ARCHS.get(arch, -1), f"{shared} bytes of LDS (> {ROCM_ARCHS.get(arch)})"),
            (block <= k.get("max_flat_workgroup_size", 0),
             f"max workgroup {k.get('max_flat_workgroup_size')} < {block}"),
            ([(a.get("value_kind"), a.get("size"), a.get("offset")) for a in explicit]
             == [("global_buffer", 8, 8 * i) for i in range(n_args)],
             f"explicit kernel arguments {[(a.get('value_kind'), a.get('size'), a.get('offset')) for a in explicit]}, "
             f"expected {n_args} 8-byte global pointers"),
        ]
    bad = [why for ok, why in problems if not ok]
    if bad:
        raise HipdnnError(Status.INTERNAL_ERROR, f"generated {arch} kernel {name} breaks IREE's HIP launch: "
                                                 + "; ".join(bad))
    return co
