"""Generated GPU kernels for the IREE engine (knob ``GPU_KERNELS``): the kernel generators.

Owns the Triton templates (matmul + epilogue, attention forward) and their ahead-of-time compilation
(no GPU needed) into cubin/PTX bytes for each NVIDIA arch, or one HSACO for a ROCm plan's AMD arch, returned as
``lowering.ops.generated_matmul.GeneratedKernel`` values that the lowering embeds in the module (``hal.dispatch.extern``). May import ``lowering`` and ``triton``
(lazily: a restored plan never imports this package's generators). docs/generated_kernels.md.
"""
from __future__ import annotations

from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import (ARCHS, PINNED_TRITON,  # noqa: F401
                                                                   generator_id, triton_version)


def generate(pattern, target: str = "") -> tuple:
    """The kernel variants (``GeneratedKernel``s) of a pattern of ``lowering.ops.generated_matmul``
    (:class:`MatmulPattern`) or ``lowering.ops.generated_sdpa`` (:class:`SdpaPattern`) for the plan
    ``target`` (``"rocm:gfx942"``/``"rocm:gfx950"``: one HSACO, ``triton_rocm.py``; else CUDA's variants)."""
    from lowering.ops.generated_conv import ConvPattern
    from lowering.ops.generated_sdpa import SdpaPattern
    if isinstance(pattern, ConvPattern):   # conv fprop (lowering.ops.generated_conv): CUDA only
        from hipdnn_iree.plugins.iree_linalg.kernels.triton_conv import generate as conv
        return conv(pattern, target)
    if isinstance(pattern, SdpaPattern):
        from hipdnn_iree.plugins.iree_linalg.kernels.triton_sdpa import generate as sdpa
        return sdpa(pattern, target)
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import generate as matmul
    return matmul(pattern, target)
