"""The IREE engine's knobs, and how knob values become one lowering policy and one flag list.

Every choice the engine makes for a graph goes through :func:`resolve`: the target's measured
heuristic (each knob's ``AUTO``), overridden by the knob values of the engine config. The result,
a :class:`Resolved` (``LoweringPolicy`` + compiler flags), is what the compile cache keys on, so
two configs that resolve alike share one module and two that differ never do.

Example:
    >>> from graph_ir.desc import OpKind
    >>> s = GraphSummary(kinds=frozenset({OpKind.SDPA}), has_double=False, conv_ranks=(), f32_only=True)
    >>> resolve(parse_target("llvm-cpu:host"), s, {}).policy.sdpa_fused
    False
    >>> resolve(parse_target("llvm-cpu:host"), s, {"SDPA_FORM": "FUSED"}).policy.sdpa_fused
    True
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass

from hipdnn_iree.plugin_sdk.engine_config import HeurMode, Knob
from hipdnn_iree.plugins.iree_linalg.targets import (CPU_CONV1D_FLAGS, CPU_FLAGS, DOUBLE_FLAG, GPU_CONV_FLAGS, Target,
                                                     parse_target)  # noqa: F401  (parse_target: doctest)
from hipdnn_iree.plugin_sdk.types import DataType
from graph_ir.desc import GraphDesc
from graph_ir.opdef import OPS, traits_of
from lowering.policy import LoweringPolicy

AUTO = "AUTO"
KNOBS = (
    Knob("SDPA_FORM", (AUTO, "FUSED", "COMPOSED"), AUTO,
         "sdpa as IREE's fused attention op or as matmul/softmax/matmul (AUTO: composed on CPUs, fused on "
         "GPUs where the element and mask types allow)"),
    Knob("CONV_LAYOUT", (AUTO, "CHANNELS_FIRST", "CHANNELS_LAST"), AUTO,
         "convolutions channels-last (CPU: named NHWC ops with relayouts in dispatches of their own; GPU: "
         "IREE's convert-conv-to-channels-last pass) or as declared (AUTO: the measured rule per target)"),
    Knob("DATA_TILING", (AUTO, "ON", "OFF"), AUTO,
         "IREE data tiling (CPU: matmuls to the mmt4d ukernel; AUTO: on for CPU graphs without sdpa that are "
         "all-f32, or bf16 without convolutions)"),
    Knob("IM2COL", (AUTO, "ON", "OFF"), AUTO,
         "convolutions as im2col + matmul (AUTO: on for CPU graphs whose convs are all 1-D, with data tiling)"),
    Knob("OPT_LEVEL", (AUTO, "O0", "O1", "O2", "O3"), AUTO, "--iree-opt-level (AUTO: IREE's default)"),
    Knob("GPU_MATMUL_TILE", (AUTO, "32X128", "64X64", "64X128", "64X64_SMEM", "128X64_SMEM"), AUTO,
         "GPU only: every 2-D matmul dispatch (M, N, K loops) compiled with IREE's TileAndFuse pipeline and an "
         "MxN workgroup tile (K step 32, 256 threads), set through a transform-dialect tuning spec; _SMEM: both "
         "operand tiles staged in shared memory, and batched (B, M, N, K) contractions and the 1x1 convolutions "
         "IREE turns into matmuls matched too (AUTO: IREE's own choice per dispatch)"),
    Knob("GPU_CONV_TILE", (AUTO, "4X8X64_SMEM"), AUTO,
         "GPU only: direct 2-D convolutions with an f32 input (loops n, oh, ow, f, kh, kw, c) tiled 1x4x8x64 "
         "(oh, ow, f) per 256-thread workgroup and depthwise ones (n, c, h, w, kh, kw) 1x4x8x56, operands in "
         "shared memory, through a transform-dialect tuning spec (AUTO: IREE's own choice)"),
    Knob("GPU_PAD_FUSION", (AUTO, "ON", "OFF"), AUTO,
         "GPU only: a convolution's zero padding fused into the conv dispatch instead of a copy of its own "
         "(--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops; AUTO: off, IREE's default)"),
    Knob("F32_CONV_MATH", (AUTO, "IEEE", "TF32"), AUTO,
         "f32 convolutions (fprop, dgrad, wgrad) in IEEE f32, or with their operands rounded to TF32 (10 "
         "mantissa bits) and f32 accumulation, the numerics of TF32 tensor cores that cuDNN and PyTorch use "
         "for FLOAT convolutions on NVIDIA GPUs (AUTO: IEEE; the cuDNN facade picks TF32 on CUDA)"),
    Knob("DEQUANT_MATMUL", (AUTO, "ONE_DISPATCH", "SPLIT"), AUTO,
         "a block_scale_dequantize read only by the matmul after it: one dispatch region with that matmul "
         "(the dequantized operand never written to memory) or IREE's own dispatches (AUTO: ONE_DISPATCH with "
         "the 128X64_SMEM matmul tile on CUDA for graphs of dequantize-matmuls with at least 128 rows, SPLIT "
         "elsewhere: the faster forms measured on an H200 at 2048 rows and on a 2-core CPU, "
         "benchmarks/gpu_one_dispatch.py (retired; in git history at commit 9e99c4b))"),
    Knob("GPU_KERNELS", (AUTO, "GENERATED", "IREE"), AUTO,
         "CUDA, and ROCm gfx942/gfx950 (compile-checked only, never run on an AMD GPU): ops with a kernel pattern "
         "(matmul and the pointwise chain after it, sdpa forward, and on CUDA conv fprop as implicit GEMM) as kernels generated ahead of time by Triton and "
         "embedded in the module (hal.dispatch.extern), every other op as IREE compiles it; a graph without a "
         "pattern, or another ROCm arch, builds as IREE and reports IREE (AUTO: IREE until the generated "
         "kernels are measured faster on a GPU; docs/generated_kernels.md)"),
    Knob("SHAPE_SPECIALIZE", (AUTO, "ON", "OFF"), AUTO,
         "dynamic-shape plans only: the module also holds the static code of the build shape, run when every "
         "bound tensor has its built dims and strides (AUTO: on for override-shape plans)"),
)
KNOB_NAMES = tuple(k.name for k in KNOBS)
IM2COL_FLAG = CPU_CONV1D_FLAGS[0]
# DEQUANT_MATMUL AUTO on CUDA: one dispatch region with this tile from this many matmul rows (M) up.
# NOTE: measured at M=2048 only (H200); 128 is where the 128-row tile is full (the decode then done once
# per column tile, as SPLIT's decode dispatch does it), a choice, not a measurement: a GPU run of
# benchmarks/gpu_one_dispatch.py (retired; in git history at commit 9e99c4b) --deq-rows 16,128,512,2048 would settle it (this session's got no machine)
DEQUANT_MATMUL_TILE = "128X64_SMEM"
DEQUANT_MATMUL_ROWS = 128
NO_REDUCTION_DISTRIBUTION_FLAG = "--iree-codegen-llvmgpu-use-reduction-vector-distribution=false"
PAD_FUSION_FLAG = "--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops"

# NOTE: IREE 3.13 ignores --iree-codegen-tuning-spec-path on CUDA (its materialize pass never sees the
# path), but --iree-codegen-transform-dialect-library=<file>@__kernel_config is applied before IREE picks
# a lowering strategy. The spec annotates each (parallel, parallel, reduction) linalg op with two inputs
# (a matmul, its transposed-operand variants, mixed f32 x f16 included) with a compilation_info
# (_MATCH below: one matcher + one config per loop structure; the plain tiles without promoted operands).

# The _SMEM tiles and GPU_CONV_TILE: one spec module with a matcher per loop structure. NOTE: measured
# on an H200 (IREE 3.13, sm_80 PTX, docs/benchmarks/autotune.md): IREE's SIMT configs for the f32 x f16
# matmuls of f16/bf16 graphs (their activations are f32 virtual tensors, so no MMA intrinsic applies)
# and for f32 matmuls read both operands from global memory per thread; promote_operands = [0, 1]
# (shared-memory tiles) made the matmul blocks 2.1-3.5x faster than the default, against 1.4-1.75x for
# the plain 64X64 tile. The conv tile made IREE's 32-thread direct convs (f32-input 3x3 and 7x7)
# 1.3-2.2x faster. Operands and accumulation types are unchanged (f32 accumulation, same results).
_MATCH = """  transform.named_sequence @match_{name}(%op: !transform.any_op {{transform.readonly}}) -> (!transform.any_op) {{
    transform.match.operation_name %op [{ops}] : !transform.any_op
    %s = transform.match.structured %op : (!transform.any_op) -> !transform.any_op {{
    ^bb0(%l: !transform.any_op):
      %rank = transform.match.structured.rank %l : (!transform.any_op) -> !transform.param<i64>
      %r = transform.param.constant {rank} : i64 -> !transform.param<i64>
      transform.match.param.cmpi eq %rank, %r : !transform.param<i64>
      %ins = transform.match.structured.num_inputs %l : (!transform.any_op) -> !transform.param<i64>
      %two = transform.param.constant 2 : i64 -> !transform.param<i64>
      transform.match.param.cmpi eq %ins, %two : !transform.param<i64>
      "transform.match.structured.dim"(%l) <{{raw_dim_list = array<i64: {par}>, parallel}}> : (!transform.any_op) -> ()
      "transform.match.structured.dim"(%l) <{{raw_dim_list = array<i64: {red}>, reduction}}> : (!transform.any_op) -> ()
      transform.match.structured.yield %l : !transform.any_op
    }}
{extra}    transform.yield %op : !transform.any_op
  }}
  transform.named_sequence @apply_{name}(%op: !transform.any_op {{transform.readonly}}) {{
    %cfg = transform.param.constant #iree_codegen.compilation_info<
      lowering_config = #iree_gpu.lowering_config<{{workgroup = {wg}, reduction = {red_tile}, thread = {th}{promote}}}>,
      translation_info = #iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> workgroup_size = {size} subgroup_size = 32>
    > -> !transform.any_param
    transform.annotate %op "compilation_info" = %cfg : !transform.any_op, !transform.any_param
    transform.yield
  }}
"""
_F32_INPUT = """    %in0 = transform.get_operand %op[0] : (!transform.any_op) -> !transform.any_value
    transform.iree.match.cast_compatible_type %in0 = tensor<?x?x?x?xf32> : !transform.any_value
"""


def _entry(name, ops, rank, n_par, extra, wg, red_tile, th, size, promote: bool = True) -> str:
    return _MATCH.format(name=name, ops=", ".join(f'"{o}"' for o in ops), rank=rank,
                         par=", ".join(str(i) for i in range(n_par)), red=", ".join(str(i) for i in range(n_par, rank)),
                         extra=extra, wg=list(wg), red_tile=list(red_tile), th=list(th), size=list(size),
                         promote=", promote_operands = [0, 1]" if promote else "")


def tile_spec_text(tile: str | None, conv_tile: str | None = None) -> str:
    """The transform-dialect spec for a ``GPU_MATMUL_TILE`` value ``"MXN"`` (32 x 8 threads) or
    ``"MXN_SMEM"``, and/or a ``GPU_CONV_TILE`` value (one module: IREE applies one library)."""
    entries = {}   # matcher name -> its match/apply pair

    def add(name, *args, **kw):
        entries[name] = _entry(name, *args, **kw)
    if tile:
        m, n = (int(v) for v in tile.upper().split("_")[0].split("X"))
        if tile.upper().endswith("_SMEM"):
            for rank in (3, 4):   # (M, N, K) and (B, M, N, K)
                lead = [1] * (rank - 3)
                add(f"mm{rank}", ("linalg.generic", "linalg.matmul", "linalg.batch_matmul"), rank, rank - 1,
                    "", lead + [m, n, 0], [0] * (rank - 1) + [32], lead + [m // 32, n // 8, 0], (32, 8, 1))
        else:
            add("mm", ("linalg.generic", "linalg.matmul"), 3, 2, "", [m, n, 0], [0, 0, 32], [m // 32, n // 8, 0],
                (32, 8, 1), promote=False)
    if conv_tile:
        # (n, oh, ow, f, kh, kw, c) with an f32 input: f16 x f16 convs keep IREE's igemm + MMA config
        add("conv7", ("linalg.generic", "linalg.conv_2d_nhwc_hwcf", "linalg.conv_2d_nhwc_fhwc"), 7, 4,
            _F32_INPUT, [1, 4, 8, 64, 0, 0, 0], [0, 0, 0, 0, 1, 1, 8], [1, 1, 2, 4, 0, 0, 0], (256, 1, 1))
        # depthwise (n, c, h, w, kh, kw)
        add("conv6", ("linalg.generic", "linalg.depthwise_conv_2d_nchw_chw"), 6, 4, "",
            [1, 4, 8, 56, 0, 0], [0, 0, 0, 0, 3, 3], [1, 1, 1, 7, 0, 0], (256, 1, 1))
    pairs = ", ".join(f"@match_{n} -> @apply_{n}" for n in entries)
    return ("module @hipdnn_iree_gpu_tiles attributes { transform.with_named_sequence } {\n" + "".join(entries.values())
            + "  transform.named_sequence @__kernel_config(%v: !transform.any_op {transform.consumed}) -> (!transform.any_op)\n"
            + "      attributes { iree_codegen.tuning_spec_entrypoint } {\n"
            + f"    %r = transform.foreach_match in %v {pairs} : (!transform.any_op) -> (!transform.any_op)\n"
            + "    transform.yield %r : !transform.any_op\n  }\n}\n")


def tile_spec_flag(tile: str | None, conv_tile: str | None = None) -> str:
    """The compiler flag that applies ``tile`` (and ``conv_tile``): the spec is written once to a file
    named by its hash, so the flag (part of the compile cache key) changes whenever the spec's text does."""
    text = tile_spec_text(tile, conv_tile)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), "hipdnn-iree-specs")
    label = "_".join(v for v in (tile, conv_tile and f"conv{conv_tile}") if v)
    path = os.path.join(folder, f"gpu_matmul_tile_{label}_{digest}.mlir")
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    return f"--iree-codegen-transform-dialect-library={path}@__kernel_config"


def _dequant_matmul_rows(desc: GraphDesc) -> int | None:
    """:attr:`GraphSummary.dequant_matmul_rows`: the graphs of block-scaled weights times activations
    (plus elementwise ops), whose every contraction is a dequantize-matmul."""
    dequantized = {n.attrs.y_uid for n in desc.nodes if "dequantize" in OPS[n.kind].traits
                   and desc.tensor(n.attrs.y_uid).data_type == DataType.FLOAT}
    rows = []
    for n in desc.nodes:
        traits = OPS[n.kind].traits
        if "dequantize" in traits or "elementwise" in traits:
            continue
        # NOTE: one dequantized operand (block-scaled weights, activations as they are): the form run on an
        # H200; with both operands dequantized the region compiles for CUDA but was not run on a GPU
        if "contraction" not in traits or len(set(n.attrs.inputs()) & dequantized) != 1:
            return None
        dims = desc.tensor(n.attrs.inputs()[0]).dims   # the matmul's a: [..., M, K]
        if len(dims) < 2 or not isinstance(dims[-2], int):
            return None
        rows.append(dims[-2])
    return min(rows) if rows else None


@dataclass(frozen=True)
class GraphSummary:
    """What the knob rules look at in a graph. The rules ask about op traits (``graph_ir.opdef``:
    "conv", "conv_fprop", "contraction", "attention" ...), never op kinds: :attr:`traits`."""

    kinds: frozenset
    has_double: bool
    conv_ranks: tuple
    f32_only: bool
    int_conv: bool = False   # a conv_fprop with an INT8/UINT8 operand
    # the fewest rows (M) of a matmul when every node is a matmul reading one FLOAT block_scale_dequantize
    # output (and an operand not dequantized), that dequantize or an elementwise op; None otherwise
    # (see DEQUANT_MATMUL_ROWS)
    dequant_matmul_rows: int | None = None
    has_f16: bool = False    # a HALF tensor or compute type

    @classmethod
    def of(cls, desc: GraphDesc) -> "GraphSummary":
        low = (DataType.HALF, DataType.BFLOAT16)
        types = [t.data_type for t in desc.tensors]
        computes = [n.compute_data_type for n in desc.nodes] + [desc.compute_data_type]
        fprops = [n for n in desc.nodes if "conv_fprop" in OPS[n.kind].traits]
        conv_ranks = tuple(len(desc.tensor(n.attrs.x_uid).dims) - 2 for n in fprops)
        ints = (DataType.INT8, DataType.UINT8)
        int_conv = any(desc.tensor(n.attrs.x_uid).data_type in ints or desc.tensor(n.attrs.w_uid).data_type in ints
                       for n in fprops)
        return cls(frozenset(n.kind for n in desc.nodes), DataType.DOUBLE in types or DataType.DOUBLE in computes,
                   conv_ranks, not any(t in low for t in types + computes), int_conv, _dequant_matmul_rows(desc),
                   DataType.HALF in types + computes)

    @property
    def traits(self) -> frozenset:
        """The traits of the graph's op kinds (their OpDefs')."""
        return traits_of(self.kinds)

    @property
    def has_conv(self) -> bool:
        return "conv" in self.traits


@dataclass(frozen=True)
class Resolved:
    """One engine config made concrete: the lowering policy and the flags after the target's own."""

    policy: LoweringPolicy
    flags: tuple

    @property
    def identity(self) -> tuple:
        return (self.policy, self.flags)


def resolve(target: Target, summary: GraphSummary, knobs: dict, dynamic: bool = False) -> Resolved:
    """The policy and flags for ``knobs`` (checked names/values; missing ones are ``AUTO``).
    ``dynamic``: the build lowers some dims as dynamic (an override-shape graph)."""
    get = lambda name: knobs.get(name, AUTO)  # noqa: E731
    cpu = target.backend == "llvm-cpu"
    policy = LoweringPolicy.for_target(str(target))
    traits = summary.traits
    sdpa = get("SDPA_FORM")
    if sdpa != AUTO:
        policy = policy.with_(sdpa_fused=sdpa == "FUSED")
    layout = get("CONV_LAYOUT")
    if cpu and layout != AUTO:
        last = layout == "CHANNELS_LAST"
        policy = policy.with_(conv_channels_last=last, conv3d_as_2d=last, dgrad_channels_last=last,
                              wgrad_channels_last=last, grouped_channels_last=last)
    dq = get("DEQUANT_MATMUL")
    # NOTE: AUTO is ONE_DISPATCH for CUDA graphs of dequantize-matmuls with at least DEQUANT_MATMUL_ROWS rows
    # (with the 128X64_SMEM tile below) and SPLIT elsewhere; measured on an H200 (benchmarks/gpu_one_dispatch.py (retired; in git history at commit 9e99c4b),
    # docs/gpu_results/gpu_one_dispatch_h200.json) and a 2-core CPU (ONE_DISPATCH 5.9x slower there)
    rows = summary.dequant_matmul_rows
    if dq == AUTO and target.backend == "cuda" and rows is not None and rows >= DEQUANT_MATMUL_ROWS \
            and get("GPU_MATMUL_TILE") == AUTO:
        dq = "ONE_DISPATCH"
    if dq == "ONE_DISPATCH" and "dequantize" in traits and "contraction" in traits:
        policy = policy.with_(dequant_matmul_region=True)
    flags = [DOUBLE_FLAG] if summary.has_double else []
    if not cpu:
        # NOTE: measured on an H200 (IREE 3.13, sm_80 PTX): f16/bf16 conv_fprop in the NCHW form gave
        # NaN and was right (and 16% faster) with IREE's channels-last pass, while f16/bf16 strided
        # conv_dgrad was right only without it (targets.GPU_CONV_FLAGS). AUTO keeps that rule.
        auto = (bool(traits & {"conv_fprop", "conv_wgrad"})
                and ("conv_dgrad" not in traits or "conv_fprop" in traits))
        # NOTE: the pass fails on a conv_wgrad with a dynamic N (graph_ir/dynamic.py lets N vary for wgrad
        # when the graph has no conv_fprop): such dynamic builds compile without it
        if dynamic and "conv_fprop" not in traits:
            auto = False
        if (layout == "CHANNELS_LAST" and summary.has_conv) or (layout == AUTO and auto):
            flags += list(GPU_CONV_FLAGS)
    # NOTE: data tiling by default for CPU graphs without sdpa that are all-f32, or bf16 without convs: with
    # f16/bf16 IREE 3.13 fails to compile causal sdpa and im2col'd convs, and it slowed the CPU attention
    # composition 6x (docs/benchmarks/flags.md); a bf16 1024^3 matmul ran 2.4-2.7x faster with it on a 2-core
    # Zen 4 (8.0-9.4 vs 21.8 ms, benchmarks/cpu_vs_torch.py, paired), a bf16 3x3 conv the same; f16 not measured.
    tiling = get("DATA_TILING")
    auto_tiled = summary.f32_only or not (summary.has_conv or summary.has_f16)
    tiled = (cpu and auto_tiled and "attention" not in traits) if tiling == AUTO else tiling == "ON"
    if policy.dequant_matmul_region:
        # NOTE: IREE 3.13's data tiling crashed (SIGSEGV, llvm-cpu) on a matmul inside a dispatch region
        # formed before it runs; the region's matmul is compiled untiled
        tiled = False
    if tiled:
        flags += list(CPU_FLAGS)
    im2col = get("IM2COL")
    if im2col == AUTO:
        im2col_on = cpu and tiled and tiling == AUTO and bool(summary.conv_ranks) and set(summary.conv_ranks) == {1}
    else:
        im2col_on = im2col == "ON" and summary.has_conv
    if im2col_on:
        flags.append(IM2COL_FLAG)
        if not summary.f32_only or summary.int_conv:
            # NOTE: IREE 3.13's im2col pass emits `arith.addf (f16, f32) -> f16` for a conv with
            # f16/bf16 operands and an f32 accumulator and fails to compile (every x86 CPU target,
            # and cuda:sm_80 on an H200): such convs take f32 operands in this form. The same for
            # i8 operands with an i32 accumulator (`arith.addi` of i8 and i32, llvm-cpu): i32 operands.
            policy = policy.with_(conv_acc_operands=True)
    # NOTE: AUTO stays IREE everywhere: the generated kernels were right and faster on an H100 (one run,
    # docs/generated_kernels.md), but the random-graph fuzzer's GPU tier has not run on them yet
    if get("GPU_KERNELS") == "GENERATED" and target.backend == "cuda" and _has_pattern_op(traits) and not dynamic:
        from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import generator_id
        policy = policy.with_(generated_kernels=generator_id() or "triton-missing")
    elif get("GPU_KERNELS") == "GENERATED" and _rocm_generated(target) and _has_pattern_op(traits) and not dynamic:
        # NOTE: ROCm (gfx942, gfx950): compile-checked on the CPU only, never run on an AMD GPU
        from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import generator_id
        policy = policy.with_(generated_kernels=generator_id(target.arch) or "triton-missing")
    if get("F32_CONV_MATH") == "TF32" and summary.has_conv:
        policy = policy.with_(tf32_conv=True)
    if not cpu and "gather" in traits:
        # NOTE: IREE 3.13's GPU reduction vector-distribution pipeline fails ("failed to distribute") on
        # a contraction whose body reads an operand with tensor.extract at data-dependent indices (the
        # MoE grouped matmul; cuda:sm_80 at every size tried, rocm:gfx942 from 256x256x512 up); the
        # graphs that have one compile with IREE's other GPU pipelines (compile-tested, tests/test_moe.py)
        flags.append(NO_REDUCTION_DISTRIBUTION_FLAG)
    elif not cpu and policy.dequant_matmul_region:
        # NOTE: with the dequantization in its region IREE 3.13 gave the matmul its reduction
        # vector-distribution config (one 32-thread workgroup per output element: 140x slower than SPLIT
        # on an H100); without that pipeline it takes TileAndFuse, as the split matmul does
        flags.append(NO_REDUCTION_DISTRIBUTION_FLAG)
    if get("OPT_LEVEL") != AUTO:
        flags.append(f"--iree-opt-level={get('OPT_LEVEL')}")
    if not cpu and get("GPU_PAD_FUSION") == "ON" and summary.has_conv:
        flags.append(PAD_FUSION_FLAG)
    # NOTE: the plain tiles only for graphs with a matmul op (as measured); the _SMEM ones also for conv
    # graphs, whose 1x1 convs IREE turns into (B,) M, N, K contractions
    mm_tile = get("GPU_MATMUL_TILE")
    if mm_tile == AUTO and target.backend == "cuda" and policy.dequant_matmul_region and rows is not None:
        # NOTE: the region's f16 x f32 matmul with IREE's own config ran 2.1x (MXFP8) and 4.4x (NVFP4) slower
        # than SPLIT on an H200 ([2048x4096x4096]); with this tile 2.7 and 2.9 ms: 6.7x and 6.3x faster than
        # SPLIT's default (17.9, 18.4 ms) and 0.87x / 0.82x the time of SPLIT with the same tile (3.1, 3.6 ms)
        mm_tile = DEQUANT_MATMUL_TILE
    mm_tile = None if mm_tile == AUTO or not ("contraction" in traits or (mm_tile.endswith("_SMEM") and summary.has_conv)) \
        else mm_tile
    conv_tile = get("GPU_CONV_TILE") if get("GPU_CONV_TILE") != AUTO and "conv_fprop" in traits else None
    if not cpu and (mm_tile or conv_tile):
        flags.append(tile_spec_flag(mm_tile, conv_tile))
    return Resolved(policy, tuple(flags))


def _has_pattern_op(traits) -> bool:
    """Whether a graph has an op a generated kernel may replace (a matmul, an sdpa forward, a conv fprop:
    CUDA only, ``build.generated_kernels``)."""
    return "contraction" in traits or "attention" in traits or "conv_fprop" in traits


def _rocm_generated(target: Target) -> bool:
    """Whether ``target`` is a ROCm arch the kernel generator builds HSACOs for (gfx942, gfx950)."""
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_rocm import rocm_arch
    return rocm_arch(str(target)) is not None


def _has_generator() -> bool:
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import triton_version
    return triton_version() is not None


def shape_specialize(knobs: dict, spec, override: bool) -> bool:
    """Whether a dynamic build (``spec``: its ShapeSpec, None for a static build) also carries the
    static function of its build shape (``SHAPE_SPECIALIZE``; AUTO: override-shape plans). Never for
    static builds, nor for a spec in which no dim varies (the dynamic module is the static one)."""
    value = knobs.get("SHAPE_SPECIALIZE", AUTO)
    if spec is None or not spec.is_dynamic():
        return False
    return override if value == AUTO else value == "ON"


def candidates(target: Target, summary: GraphSummary, mode: HeurMode, tuned: dict | None = None) -> list[dict]:
    """Knob dicts worth building for ``mode``, best guess first, none resolving like an earlier one.

    A: the stored autotune result when there is one (``tuned``), else every knob ``AUTO``.
    B: A's config, then each knob the graph gives a meaning to set to each other value.
    FALLBACK: the plainest forms: sdpa composed, no data tiling, no im2col, convs as declared on CPUs.
    """
    cpu = target.backend == "llvm-cpu"
    base = dict(tuned or {})
    if mode == HeurMode.FALLBACK:
        fb = {"DATA_TILING": "OFF", "IM2COL": "OFF"}
        if "attention" in summary.traits:
            fb["SDPA_FORM"] = "COMPOSED"
        if cpu and summary.has_conv:
            fb["CONV_LAYOUT"] = "CHANNELS_FIRST"
        out = [fb]
    elif mode == HeurMode.A:
        out = [base]
    else:
        out = [base]
        relevant = {"SDPA_FORM": "attention" in summary.traits, "CONV_LAYOUT": summary.has_conv,
                    "DATA_TILING": True, "IM2COL": summary.has_conv, "OPT_LEVEL": True,
                    "GPU_MATMUL_TILE": not cpu and ("contraction" in summary.traits or summary.has_conv),
                    "GPU_CONV_TILE": not cpu and "conv_fprop" in summary.traits,
                    "GPU_PAD_FUSION": not cpu and summary.has_conv,
                    "DEQUANT_MATMUL": "dequantize" in summary.traits and "contraction" in summary.traits,
                    "F32_CONV_MATH": False,     # NOTE: a numerics choice, not a speed one: never timed
                    "GPU_KERNELS": target.backend == "cuda" and _has_pattern_op(summary.traits)
                    and _has_generator(),
                    "SHAPE_SPECIALIZE": False}   # NOTE: decided per build (shape_specialize), not by resolve()
        # NOTE: measured on an H200 (IREE 3.13, sm_80): f16/bf16 conv_fprop without the channels-last pass
        # computes wrong values (rel err 0.5-1.0 in the ResNet, stem and 3-D blocks); never offered there
        wrong = {("CONV_LAYOUT", "CHANNELS_FIRST")} if (target.backend == "cuda" and not summary.f32_only
                                                         and "conv_fprop" in summary.traits) else set()
        for knob in KNOBS:
            if not relevant[knob.name]:
                continue
            for value in knob.choices:
                if value != AUTO and knob.name == "OPT_LEVEL" and value != "O3":
                    continue   # NOTE: O0-O2 are slower than the default by construction; O3 is worth timing
                if (knob.name, value) in wrong:
                    continue
                out.append({**base, knob.name: value})
    seen, unique = set(), []
    for knobs in out:
        ident = resolve(target, summary, knobs).identity
        if ident not in seen:
            seen.add(ident)
            unique.append({k: v for k, v in knobs.items() if v != AUTO})
    return unique
