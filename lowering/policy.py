"""The lowering policy: every choice of form the lowering makes, as one explicit value.

The lowering reads no environment variable and no mutable module global: which form each op
takes is a field here, passed into :func:`lowering.lower`. The engine derives a policy from the
target (its defaults are the measured heuristics) and the caller's knobs, and hashes it, with
the graph and the compiler flags, into the compile cache key (STYLE.md: every input of a
compiled module is an argument and part of its key).

Example:
    >>> p = LoweringPolicy.for_target("llvm-cpu:host")
    >>> p.sdpa_fused, p.conv_channels_last
    (False, True)
    >>> LoweringPolicy.for_target("cuda:sm_80").cuda_mma_barriers
    True
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace

# History: 1 (2026-12-01) first policy fields. Bump when a field's meaning changes.
POLICY_VERSION = 1


@dataclass(frozen=True)
class LoweringPolicy:
    """Form choices for one target. Defaults via :meth:`for_target` are the measured heuristics.

    Fields:
        target: ``backend:arch`` the module is compiled for (lowerings may pick target forms).
        sdpa_fused: emit ``iree_linalg_ext.attention`` where its element and mask types allow; else
            the matmul/softmax composition. NOTE: on a 2-core x86 CPU the composition was 29x faster
            ([1,8,512,64] f16 causal: 16 vs 470 ms); on an H200 the fused op won 13.7 -> 3.5 ms at
            [4,16,2048,128] and lost 0.28 vs 0.17 ms on short sequences (issue 19): a knob.
        conv_channels_last: conv_fprop (ungrouped or depthwise) as channels-last named ops with
            relayouts behind barriers (CPU: 160 -> 5 ms, docs/benchmarks/flags.md).
        conv3d_as_2d: ungrouped 3-D conv_fprop as KD channels-last 2-D convs (CPU: 26x).
        dgrad_channels_last / wgrad_channels_last: conv_dgrad / conv_wgrad in conv_fprop's
            channels-last form (CPU: 2-3x and 13x).
        grouped_channels_last: grouped 2-D conv_fprop channels-last (CPU).
        grouped_split_max: up to this many groups, one conv per group; past it one nhwgc op.
        conv_split_groups: grouped (not depthwise) conv_fprop and conv_wgrad in the channels-first
            form as one ungrouped conv per group (CUDA). Correctness, not speed: IREE 3.13's CUDA code
            for the grouped form is wrong in f16/bf16 (issue 49; docs/known_issues.md 10): never a knob.
        conv_as_gemm: f16/bf16 conv_fprop, conv_dgrad and conv_wgrad (their shared correlation) as a
            gathered input matrix times the filter, one batched matmul over the groups (CUDA; static
            shapes). Correctness: IREE 3.13's CUDA code for its own convolutions was wrong on random
            shapes where its matmul was right (issue 49; docs/known_issues.md 10): never a knob.
        lift_1d: 1-D convs lifted to 2-D named ops.
        conv_acc_operands: conv operands converted to the accumulator type before the conv op (set
            with IREE's CPU im2col pass on f16/bf16 convs, which it cannot otherwise compile).
        cuda_mma_barriers: compute barriers that keep IREE 3.13's CUDA f16/bf16 tensor-core
            miscompile away (docs/known_issues.md). Correctness, not speed: never a knob.
        mma_pad_reduction: f16/bf16 matmuls' reduction zero-padded to a multiple of 16 (GPU targets):
            IREE 3.13's TileAndFuse pipeline otherwise pads it from the memory after B (NaN outputs
            measured on CUDA; docs/known_issues.md 12). Correctness: never a knob.
        tf32_conv: f32 conv operands rounded to TF32 (knob F32_CONV_MATH=TF32; the cuDNN facade's
            default on CUDA, where cuDNN and PyTorch run FLOAT convolutions on TF32 tensor cores).
        dequant_matmul_region: the block_scale_dequantize(s) whose only reader is the matmul lowered
            right after them go into one ``flow.dispatch.region`` with that matmul, their codes decoded
            there (knob DEQUANT_MATMUL; its AUTO rule is in plugins/iree_linalg/knobs.py: on for CUDA
            weights-only graphs of >= 128 rows). NOTE: on a 2-core x86 CPU the region (no data tiling
            inside it) was 5.9x slower than IREE's own dispatches (11.9 vs 70.6 ms, MXFP8
            [512x1024x768]); on an H200, with a 128x64 matmul tile, 6.7x faster than them
            (benchmarks/gpu_one_dispatch.py (retired; in git history at commit 9e99c4b)).
        norm_one_pass: layernorm's row statistics in one pass over x (the sum and the sum of squares of
            x minus the row's first element, one two-result reduction; the normalize derives the mean and
            1/std from them) instead of two (the mean, then the squared deviations). NOTE: on a 2-core
            Zen 4 CPU IREE fuses the one-pass form into one dispatch with the normalize: 0.48-0.80x of
            the two-pass time at [4096, 1024] f32 (benchmarks/cpu_vs_torch.py). The variance is
            E[d^2] - E[d]^2 of the shifted data, clamped at 0: it loses digits when a row's first element
            lies many standard deviations from its mean; GPUs keep the two-pass form.
        generated_kernels: "" (IREE's code for every op), or the identity of the kernel generator
            whose kernels replace the ops that have a pattern (knob GPU_KERNELS; CUDA only): for
            Triton ``"triton-<version>:<sha256 of the kernel template source, 16 hex>"``
            (hipdnn_iree/plugins/iree_linalg/kernels), so the generator's version and source are
            part of every key that hashes the policy; the kernels themselves are in the MLIR text.
    """

    target: str = "llvm-cpu:host"
    sdpa_fused: bool = False
    conv_channels_last: bool = True
    conv3d_as_2d: bool = True
    dgrad_channels_last: bool = True
    wgrad_channels_last: bool = True
    grouped_channels_last: bool = True
    grouped_split_max: int = 64
    conv_split_groups: bool = False
    conv_as_gemm: bool = False
    lift_1d: bool = True
    conv_acc_operands: bool = False
    cuda_mma_barriers: bool = False
    mma_pad_reduction: bool = False
    tf32_conv: bool = False
    dequant_matmul_region: bool = False
    norm_one_pass: bool = False
    generated_kernels: str = ""

    @classmethod
    def for_target(cls, target: str) -> "LoweringPolicy":
        """The built-in heuristic for ``target`` (``llvm-cpu:<cpu>``, ``rocm:<gfx>``, ``cuda:<sm>``)."""
        cpu = target.startswith("llvm-cpu")
        return cls(target=target, sdpa_fused=not cpu, conv_channels_last=cpu, conv3d_as_2d=cpu,
                   dgrad_channels_last=cpu, wgrad_channels_last=cpu, grouped_channels_last=cpu,
                   cuda_mma_barriers=target.startswith("cuda"), conv_split_groups=target.startswith("cuda"),
                   conv_as_gemm=target.startswith("cuda"), mma_pad_reduction=not cpu, norm_one_pass=cpu)

    @property
    def is_cpu(self) -> bool:
        return self.target.startswith("llvm-cpu")

    def with_(self, **changes) -> "LoweringPolicy":
        names = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"LoweringPolicy has no field(s) {unknown}; fields: {sorted(names)}")
        return replace(self, **changes)

    def to_json(self) -> str:
        """Canonical text (sorted keys, with the policy version): what the compile cache hashes."""
        return json.dumps({"version": POLICY_VERSION, **asdict(self)}, sort_keys=True, separators=(",", ":"))
