"""Generated GPU kernels for the IREE engine (knob ``GPU_KERNELS``): the kernel generators.

Owns the Triton templates and their ahead-of-time compilation (no GPU needed) into cubin/PTX bytes
for each NVIDIA arch, returned as ``lowering.ops.generated_matmul.GeneratedKernel`` values that the
lowering embeds in the module (``hal.dispatch.extern``). May import ``lowering`` and ``triton``
(lazily: a restored plan never imports this package's generators). docs/generated_kernels.md.
"""
from __future__ import annotations

from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import (ARCHS, PINNED_TRITON, generate,  # noqa: F401
                                                                   generator_id, triton_version)
