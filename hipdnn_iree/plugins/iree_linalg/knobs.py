"""The IREE engine's knobs, and how knob values become one lowering policy and one flag list.

Every choice the engine makes for a graph goes through :func:`resolve`: the target's measured
heuristic (each knob's ``AUTO``), overridden by the knob values of the engine config. The result,
a :class:`Resolved` (``LoweringPolicy`` + compiler flags), is what the compile cache keys on, so
two configs that resolve alike share one module and two that differ never do.

Example:
    >>> from lowering.graph_ir import OpKind
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
from lowering.graph_ir import GraphDesc, OpKind
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
         "IREE data tiling (CPU: matmuls to the mmt4d ukernel; AUTO: on for all-f32 CPU graphs without sdpa)"),
    Knob("IM2COL", (AUTO, "ON", "OFF"), AUTO,
         "convolutions as im2col + matmul (AUTO: on for CPU graphs whose convs are all 1-D, with data tiling)"),
    Knob("OPT_LEVEL", (AUTO, "O0", "O1", "O2", "O3"), AUTO, "--iree-opt-level (AUTO: IREE's default)"),
    Knob("GPU_MATMUL_TILE", (AUTO, "32X128", "64X64", "64X128"), AUTO,
         "GPU only: every 2-D matmul dispatch (M, N, K loops) compiled with IREE's TileAndFuse pipeline and an "
         "MxN workgroup tile (K step 32, 256 threads), set through a transform-dialect tuning spec (AUTO: IREE's "
         "own choice per dispatch)"),
    Knob("SHAPE_SPECIALIZE", (AUTO, "ON", "OFF"), AUTO,
         "dynamic-shape plans only: the module also holds the static code of the build shape, run when every "
         "bound tensor has its built dims and strides (AUTO: on for override-shape plans)"),
)
KNOB_NAMES = tuple(k.name for k in KNOBS)
IM2COL_FLAG = CPU_CONV1D_FLAGS[0]

# NOTE: IREE 3.13 ignores --iree-codegen-tuning-spec-path on CUDA (its materialize pass never sees the
# path), but --iree-codegen-transform-dialect-library=<file>@__kernel_config is applied before IREE picks
# a lowering strategy. The spec annotates each (parallel, parallel, reduction) linalg op with two inputs
# (a matmul, its transposed-operand variants, mixed f32 x f16 included) with a compilation_info.
_TILE_SPEC = """module @hipdnn_iree_gpu_matmul_tile attributes {{ transform.with_named_sequence }} {{
  transform.named_sequence @match_mm(%op: !transform.any_op {{transform.readonly}}) -> (!transform.any_op) {{
    transform.match.operation_name %op ["linalg.generic", "linalg.matmul"] : !transform.any_op
    %s = transform.match.structured %op : (!transform.any_op) -> !transform.any_op {{
    ^bb0(%l: !transform.any_op):
      %rank = transform.match.structured.rank %l : (!transform.any_op) -> !transform.param<i64>
      %three = transform.param.constant 3 : i64 -> !transform.param<i64>
      transform.match.param.cmpi eq %rank, %three : !transform.param<i64>
      %ins = transform.match.structured.num_inputs %l : (!transform.any_op) -> !transform.param<i64>
      %two = transform.param.constant 2 : i64 -> !transform.param<i64>
      transform.match.param.cmpi eq %ins, %two : !transform.param<i64>
      "transform.match.structured.dim"(%l) <{{raw_dim_list = array<i64: 0, 1>, parallel}}> : (!transform.any_op) -> ()
      "transform.match.structured.dim"(%l) <{{raw_dim_list = array<i64: 2>, reduction}}> : (!transform.any_op) -> ()
      transform.match.structured.yield %l : !transform.any_op
    }}
    transform.yield %op : !transform.any_op
  }}
  transform.named_sequence @apply_mm(%op: !transform.any_op {{transform.readonly}}) {{
    %cfg = transform.param.constant #iree_codegen.compilation_info<
      lowering_config = #iree_gpu.lowering_config<{{workgroup = [{m}, {n}, 0], reduction = [0, 0, 32], thread = [{tm}, {tn}, 0]}}>,
      translation_info = #iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> workgroup_size = [32, 8, 1] subgroup_size = 32>
    > -> !transform.any_param
    transform.annotate %op "compilation_info" = %cfg : !transform.any_op, !transform.any_param
    transform.yield
  }}
  transform.named_sequence @__kernel_config(%v: !transform.any_op {{transform.consumed}}) -> (!transform.any_op)
      attributes {{ iree_codegen.tuning_spec_entrypoint }} {{
    %r = transform.foreach_match in %v @match_mm -> @apply_mm : (!transform.any_op) -> (!transform.any_op)
    transform.yield %r : !transform.any_op
  }}
}}
"""


def tile_spec_text(tile: str) -> str:
    """The transform-dialect spec for a ``GPU_MATMUL_TILE`` value ``"MXN"`` (32 x 8 threads)."""
    m, n = (int(v) for v in tile.upper().split("X"))
    return _TILE_SPEC.format(m=m, n=n, tm=m // 32, tn=n // 8)


def tile_spec_flag(tile: str) -> str:
    """The compiler flag that applies ``tile``: the spec is written once to a file named by its hash, so
    the flag (part of the compile cache key) changes whenever the spec's text does."""
    text = tile_spec_text(tile)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), "hipdnn-iree-specs")
    path = os.path.join(folder, f"gpu_matmul_tile_{tile}_{digest}.mlir")
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    return f"--iree-codegen-transform-dialect-library={path}@__kernel_config"


@dataclass(frozen=True)
class GraphSummary:
    """What the knob rules look at in a graph."""

    kinds: frozenset
    has_double: bool
    conv_ranks: tuple
    f32_only: bool

    @classmethod
    def of(cls, desc: GraphDesc) -> "GraphSummary":
        low = (DataType.HALF, DataType.BFLOAT16)
        types = [t.data_type for t in desc.tensors]
        computes = [n.compute_data_type for n in desc.nodes] + [desc.compute_data_type]
        conv_ranks = tuple(len(desc.tensor(n.attrs.x_uid).dims) - 2 for n in desc.nodes if n.kind == OpKind.CONV_FPROP)
        return cls(frozenset(n.kind for n in desc.nodes), DataType.DOUBLE in types or DataType.DOUBLE in computes,
                   conv_ranks, not any(t in low for t in types + computes))

    @property
    def has_conv(self) -> bool:
        return bool(self.kinds & {OpKind.CONV_FPROP, OpKind.CONV_DGRAD, OpKind.CONV_WGRAD})


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
    kinds = summary.kinds
    sdpa = get("SDPA_FORM")
    if sdpa != AUTO:
        policy = policy.with_(sdpa_fused=sdpa == "FUSED")
    layout = get("CONV_LAYOUT")
    if cpu and layout != AUTO:
        last = layout == "CHANNELS_LAST"
        policy = policy.with_(conv_channels_last=last, conv3d_as_2d=last, dgrad_channels_last=last,
                              wgrad_channels_last=last, grouped_channels_last=last)
    flags = [DOUBLE_FLAG] if summary.has_double else []
    if not cpu:
        # NOTE: measured on an H200 (IREE 3.13, sm_80 PTX): f16/bf16 conv_fprop in the NCHW form gave
        # NaN and was right (and 16% faster) with IREE's channels-last pass, while f16/bf16 strided
        # conv_dgrad was right only without it (targets.GPU_CONV_FLAGS). AUTO keeps that rule.
        auto = (bool(kinds & {OpKind.CONV_FPROP, OpKind.CONV_WGRAD})
                and (OpKind.CONV_DGRAD not in kinds or OpKind.CONV_FPROP in kinds))
        # NOTE: the pass fails on a conv_wgrad with a dynamic N (lowering/dynamic.py lets N vary for wgrad
        # when the graph has no conv_fprop): such dynamic builds compile without it
        if dynamic and OpKind.CONV_FPROP not in kinds:
            auto = False
        if (layout == "CHANNELS_LAST" and summary.has_conv) or (layout == AUTO and auto):
            flags += list(GPU_CONV_FLAGS)
    # NOTE: data tiling only for all-f32 graphs without sdpa by default: with f16/bf16 IREE 3.13 fails
    # to compile causal sdpa and im2col'd convs, and it slowed the CPU attention composition 6x
    # (docs/benchmarks/flags.md).
    tiling = get("DATA_TILING")
    tiled = (cpu and summary.f32_only and OpKind.SDPA not in kinds) if tiling == AUTO else tiling == "ON"
    if tiled:
        flags += list(CPU_FLAGS)
    im2col = get("IM2COL")
    if im2col == AUTO:
        im2col_on = cpu and tiled and tiling == AUTO and bool(summary.conv_ranks) and set(summary.conv_ranks) == {1}
    else:
        im2col_on = im2col == "ON" and summary.has_conv
    if im2col_on:
        flags.append(IM2COL_FLAG)
    if get("OPT_LEVEL") != AUTO:
        flags.append(f"--iree-opt-level={get('OPT_LEVEL')}")
    if not cpu and get("GPU_MATMUL_TILE") != AUTO and OpKind.MATMUL in kinds:
        flags.append(tile_spec_flag(get("GPU_MATMUL_TILE")))
    return Resolved(policy, tuple(flags))


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
        if OpKind.SDPA in summary.kinds:
            fb["SDPA_FORM"] = "COMPOSED"
        if cpu and summary.has_conv:
            fb["CONV_LAYOUT"] = "CHANNELS_FIRST"
        out = [fb]
    elif mode == HeurMode.A:
        out = [base]
    else:
        out = [base]
        relevant = {"SDPA_FORM": OpKind.SDPA in summary.kinds, "CONV_LAYOUT": summary.has_conv,
                    "DATA_TILING": True, "IM2COL": summary.has_conv, "OPT_LEVEL": True,
                    "GPU_MATMUL_TILE": not cpu and OpKind.MATMUL in summary.kinds,
                    "SHAPE_SPECIALIZE": False}   # NOTE: decided per build (shape_specialize), not by resolve()
        for knob in KNOBS:
            if not relevant[knob.name]:
                continue
            for value in knob.choices:
                if value != AUTO and knob.name == "OPT_LEVEL" and value != "O3":
                    continue   # NOTE: O0-O2 are slower than the default by construction; O3 is worth timing
                out.append({**base, knob.name: value})
    seen, unique = set(), []
    for knobs in out:
        ident = resolve(target, summary, knobs).identity
        if ident not in seen:
            seen.add(ident)
            unique.append({k: v for k, v in knobs.items() if v != AUTO})
    return unique
