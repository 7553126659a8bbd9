"""The IREE engine's plugin payload: FUSPLAN (kind 2: one .vmfb, kind 3: one per target, kind 1: a
hipDNN graph compiled when restored), written from a built context and restored into one.

A restore reads top to bottom: unpack and check the FUSPLAN header (digest, signature), check the
plan against the session's device, pick the module the device runs, load it (in place when the
bytes are 64-byte aligned), read its ABI, load it on the device.
"""
from __future__ import annotations

import json

import numpy as np

from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
from hipdnn_iree.plugin_sdk.errors import to_hipdnn
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.version import __version__
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
from hipdnn_iree.plugins.iree_linalg.context import ENGINE_NAME, IreeExecutionContext, check_abi_version, tensors_from_abi
from hipdnn_iree.plugins.iree_linalg.session import IreeSession
from hipdnn_iree.plugins.iree_linalg.targets import check_runs_on, parse_target
from lowering.abi import ENTRY_POINT, GRAPH_KEY, REFLECTION_KEY  # GRAPH_KEY: base64 of the op graph FlatBuffer

IREE_ENGINE_ID = engine_id_from_name(ENGINE_NAME)
PLUGIN_NAME = "hipdnn_iree.iree_linalg"
DEVICES = {"llvm-cpu": "local", "rocm": "hip", "cuda": "cuda"}


def _major_minor(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()))
    except (IndexError, ValueError):
        return None


def _address(buf) -> int:
    """Address of a bytes-like object's first byte (read-only buffers included)."""
    return int(np.frombuffer(buf, np.uint8).ctypes.data) if len(buf) else 0


def _features_in(module) -> str:
    from hipdnn_iree.plugins.iree_linalg.cpufeatures import canonical, features_in_vmfb
    return canonical(features_in_vmfb(module))


def _sm(arch: str) -> int:
    digits = "".join(ch for ch in arch if ch.isdigit())
    return int(digits) if digits else 0



def check_compatibility(session: IreeSession, info: dict) -> None:
    """Rejects, before the payload is read, plans this handle cannot run (envelope v2 fields)."""
    from hipdnn_iree.plugins.iree_linalg.runtime import runtime_version
    cver, rver = info.get("compiler_version", ""), runtime_version()
    if _major_minor(cver) and _major_minor(rver) and _major_minor(cver) > _major_minor(rver):
        raise HipdnnError(Status.VERSION_MISMATCH,
                          f"plan's module was built by IREE compiler {cver} and needs an IREE runtime of at least "
                          f"{'.'.join(map(str, _major_minor(cver)))}; this process has IREE runtime {rver}")
    arch = info.get("target_arch", "")
    if not arch:
        return
    try:
        target = parse_target(arch)
    except HipdnnError:
        raise HipdnnError(Status.NOT_SUPPORTED, f"plan targets {arch!r}, which this plugin does not know") from None
    check_runs_on(target, session.device_uri)
    mine = session.target
    if session.device_uri is None or mine is None or mine.backend != target.backend:
        return
    if target.backend == "rocm" and target.arch != mine.arch:
        raise HipdnnError(Status.NOT_SUPPORTED, f"plan was compiled for AMD GPU arch {target.arch}; the handle's "
                                                f"device '{session.device_uri}' is {mine.arch}")
    if target.backend == "cuda" and _sm(target.arch) > _sm(mine.arch):
        raise HipdnnError(Status.NOT_SUPPORTED, f"plan needs CUDA {target.arch} or newer; the handle's device "
                                                f"'{session.device_uri}' targets {mine.arch}")


def serialize(ctx: IreeExecutionContext, plugin_version: str, plan_info=None) -> bytes:
    """FUSPLAN 1.1: kind 2 (one .vmfb) or kind 3 (one .vmfb per target) with the metadata block.

    With ``plan_info["payload"] == "hipdnn_graph"``: FUSPLAN 1.0 kind 1, the 20 fixed bytes then the
    plan's hipDNN graph FlatBuffer, as hipDNN's fusilli-provider writes its plans (no metadata, so
    no digest and no signature: its readers know neither)."""
    info = plan_info or {}
    if info.get("payload", "compiled") == "hipdnn_graph":
        graph = info.get("op_graph") or ctx.op_graph
        if not graph:
            raise HipdnnError(Status.NOT_SUPPORTED, "this plan does not carry its hipDNN graph (a plan restored "
                                                    "from a file written before hipdnn-iree 0.3): it cannot be "
                                                    "written as a hipDNN graph payload; rebuild it from its graph")
        if info.get("signing_key") is not None:
            raise HipdnnError(Status.NOT_SUPPORTED, "a hipDNN graph payload (FUSPLAN 1.0 kind 1, as the "
                                                    "fusilli-provider reads it) has no room for a signature: "
                                                    "serialize it without signing_key")
        return _fusplan.pack(bytes(graph), _fusplan.KIND_GRAPH_FLATBUFFER, minor=0)
    variants = ctx.variants or ((ctx.target, ctx.vmfb, ctx.compiler_version),)
    devices = DEVICES
    compilers = sorted({v[2] for v in variants if v[2]})
    meta = _fusplan.Metadata(
        plugin_name=PLUGIN_NAME, plugin_version=str(plugin_version),
        producer_version=str(info.get("producer_version", __version__)), compiler_version=",".join(compilers),
        target_device=devices[ctx.target.backend] if len(variants) == 1 else "",
        target_arch=",".join(str(v[0]) for v in variants),
        engine_name=ctx.engine_name, engine_knobs=json.dumps(ctx.knobs, sort_keys=True, separators=(",", ":")),
        # NOTE: only override-shape plans say which dims vary: a restored one takes other shapes
        # NOTE: dynamic plans say which dims vary (their module may come from a kernel cache, built
        # at other dims: the spec has the plan's own); the envelope's slot 5 says whether a restored
        # plan takes other shapes (override-shape plans only)
        shape_spec=ctx.shape_spec.to_json() if ctx.shape_spec is not None else "",
        # NOTE: what a host must have to run the CPU code (cpufeatures.py); kind 3: per entry
        cpu_features=ctx.cpu_features if len(variants) == 1 else "")
    if len(variants) == 1:
        kind, body = _fusplan.KIND_IREE_VMFB, [variants[0][1]]
    else:
        kind = _fusplan.KIND_MULTI_TARGET
        feats = ctx.variant_features or {}
        body = _fusplan.multi_target_parts([(str(t), devices[t.backend], v, feats.get(str(t), ""))
                                            for t, v, _ in variants])
    env = _fusplan.envelope_fields(info.get("engine_id", IREE_ENGINE_ID), info.get("workspace_size", 0),
                                   info.get("tensor_uids", sorted(t.uid for t in ctx.tensors)))
    try:
        parts = _fusplan.pack_parts(body, kind, meta, info.get("signing_key"), env)
    except TypeError as e:
        raise HipdnnError(Status.BAD_PARAM, f"signing_key: {e}") from None
    # NOTE: a backend that says it gathers (plan_info "gather") takes the payload as buffers to
    # concatenate and copies the module once, straight into the envelope; anyone else gets bytes.
    return parts if info.get("gather") else b"".join(parts)


def graph_from_serialized(session: IreeSession, serialized, plan_info=None) -> bytes:
    """The checked hipDNN graph of a kind-1 payload, without compiling: the FUSPLAN header, then
    the graph's bytes (bounds-checked decode), the node types and fields this engine honours, the
    envelope's tensor_uids against the graph's, and a lowering pass that builds no module.

    Every problem is a HipdnnError: PLUGIN_ERROR for damaged bytes, NOT_SUPPORTED for what this
    engine does not run, BAD_PARAM for an envelope that disagrees with its graph."""
    info = plan_info or {}
    try:
        plan = _fusplan.unpack(serialized)
    except _fusplan.FusplanError as e:
        raise HipdnnError(Status.PLUGIN_ERROR, str(e)) from None
    if plan.payload_kind != _fusplan.KIND_GRAPH_FLATBUFFER:
        raise HipdnnError(Status.PLUGIN_ERROR, f"FUSPLAN payload_kind {plan.payload_kind} "
                                               f"({_fusplan.KIND_NAMES[plan.payload_kind]}) holds no hipDNN graph")
    return kind1_graph(session, plan, info)



def kind1_graph(session: IreeSession, plan, info: dict, lower: bool = True) -> bytes:
    """The checked graph of a kind-1 plan. ``lower``: also lower it once without the compiler (the
    refusals of a graph this engine cannot compile, where no build follows)."""
    from lowering import LOWERINGS
    from graph_ir import GraphError, decode_graph
    from lowering._lower import lower_graph
    from graph_ir.desc import unsupported_reason
    what = "FUSPLAN payload_kind 1 (hipDNN graph FlatBuffer)"
    graph = bytes(plan.body)
    try:
        desc = decode_graph(graph)
    except GraphError as e:
        raise to_hipdnn(e, "plan", f"{what}: the graph it holds cannot be read: ") from None
    why = unsupported_reason(desc, tuple(LOWERINGS))
    if why:
        raise HipdnnError(Status.NOT_SUPPORTED, f"{what}: graph '{desc.name}' cannot be compiled by "
                                                f"{ENGINE_NAME}: {why}")
    bound = [t.uid for t in desc.bound_tensors()]
    if len(set(t.uid for t in desc.tensors)) != len(desc.tensors):
        raise HipdnnError(Status.PLUGIN_ERROR, f"{what}: graph '{desc.name}' gives two tensors the same uid")
    if "tensor_uids" in info and sorted(info["tensor_uids"]) != bound:
        raise HipdnnError(Status.BAD_PARAM, f"envelope tensor_uids {sorted(info['tensor_uids'])} disagree with "
                                            f"the plan payload's {bound} (the tensors its graph binds)")
    if not lower:
        return graph
    try:
        lower_graph(desc, str(session.target), verify=False, graph_bytes=graph)
    except GraphError as e:
        raise to_hipdnn(e, "plan", f"{what}: graph '{desc.name}' cannot be lowered: ") from None
    except HipdnnError:
        raise
    except Exception as e:   # NOTE: a gap in the lowering's own checks; still a typed refusal
        raise HipdnnError(Status.PLUGIN_ERROR, f"{what}: graph '{desc.name}' cannot be lowered "
                                               f"({type(e).__name__}: {e})") from None
    return graph

KIND1_REFUSAL = (" held by FUSPLAN payload_kind 1 (hipDNN graph FlatBuffer)", "plan")


def restore_graph(session: IreeSession, plan, info: dict) -> IreeExecutionContext:
    """Builds the plan of a kind-1 payload through the normal build path: a compile cache hit needs
    no compiler; otherwise the graph is lowered once and compiled. Without the compiler, the graph
    is checked by a lowering pass (its own refusals first) and the refusal says how to upgrade."""
    from hipdnn_iree.plugins.iree_linalg import build as _build
    graph = kind1_graph(session, plan, info, lower=False)
    try:
        ctx = _build.build(session, graph, {}, refusal=KIND1_REFUSAL)
    except HipdnnError as e:
        if e.status != Status.NOT_SUPPORTED or "iree-base-compiler" not in str(e):
            raise
        kind1_graph(session, plan, info, lower=True)
        raise HipdnnError(Status.NOT_SUPPORTED,
                          "this plan holds a hipDNN graph (FUSPLAN kind 1, as hipDNN's fusilli-provider writes "
                          "it), which is compiled when restored, and this process has no IREE compiler "
                          f"({e}): install it (pip install 'iree-base-compiler==3.13.*'), or upgrade the "
                          "plan once where it is installed: hipdnn-iree upgrade IN OUT --target <target> "
                          "(writes a compiled plan that restores without the compiler)") from None
    ctx.op_graph = graph
    return ctx


def _at_built(t, spec):
    from dataclasses import replace
    built = tuple(spec.built.get(t.uid, t.dims))
    if built == tuple(t.dims) or len(built) != len(t.dims):
        return t
    return replace(t, dims=built, strides=tuple(spec.strides_for(t.uid, built)))


def restore(session: IreeSession, serialized, plan_info=None) -> IreeExecutionContext:
    """Restores a FUSPLAN 1.0/1.1 payload. A memoryview payload (a mapped plan file) is imported
    in place: the module's bytes are not copied when they are 64-byte aligned (FORMATS.md)."""
    from hipdnn_iree.plugins.iree_linalg.multitarget import choose
    info = plan_info or {}
    verify_key = info.get("verify_key")
    env = b""
    if "engine_id" in info:
        env = _fusplan.envelope_fields(info["engine_id"], info["workspace_size"], info["tensor_uids"])
    try:
        plan = _fusplan.unpack(serialized, verify_key, env)
    except _fusplan.FusplanSignatureError as e:
        raise HipdnnError(Status.BAD_PARAM, str(e)) from None
    except _fusplan.FusplanError as e:
        raise HipdnnError(Status.PLUGIN_ERROR, str(e)) from None
    except TypeError as e:
        raise HipdnnError(Status.BAD_PARAM, f"verify_key: {e}") from None
    if plan.payload_kind == _fusplan.KIND_GRAPH_FLATBUFFER:
        return restore_graph(session, plan, info)
    if plan.metadata is not None and plan.payload_kind == _fusplan.KIND_IREE_VMFB:
        meta = plan.metadata
        check_compatibility(session, {"plugin_name": meta.plugin_name, "compiler_version": meta.compiler_version,
                                       "target_device": meta.target_device, "target_arch": meta.target_arch})
    variants_raw = [(None, plan.body)]
    chosen = 0
    features: list = [plan.metadata.cpu_features if plan.metadata is not None else ""]
    if plan.payload_kind == _fusplan.KIND_MULTI_TARGET:
        targets = [e.target for e in plan.entries]
        check_compatibility(session, {"compiler_version": plan.metadata.compiler_version})
        features = [e.cpu_features or (_features_in(plan.module(e)) if e.target.startswith("llvm-cpu") else "")
                    for e in plan.entries]
        chosen = choose(targets, session.device_uri, session.target, features)
        check_compatibility(session, {"target_arch": targets[chosen]})
        variants_raw = [(e.target, plan.module(e)) for e in plan.entries]
    body = variants_raw[chosen][1]
    from hipdnn_iree.plugins.iree_linalg.runtime import instance, rt
    in_place = False
    try:
        if _address(body) % _fusplan.BODY_ALIGNMENT == 0:
            module = rt().VmModule.wrap_buffer(instance(), body)
            in_place = True
        else:
            module = rt().VmModule.copy_buffer(instance(), body)
        fn = module.lookup_function(ENTRY_POINT)
        refl = dict(fn.reflection) if fn is not None else {}
    except Exception as e:
        raise HipdnnError(Status.PLUGIN_ERROR,
                          f"plan payload is not a loadable IREE module ({len(body)} bytes): {e}") from None
    if REFLECTION_KEY not in refl:
        raise HipdnnError(Status.PLUGIN_ERROR, "plan module has no hipdnn_iree ABI reflection: it was not "
                                               "written by hipdnn-iree")
    try:
        abi = json.loads(refl[REFLECTION_KEY])
    except (ValueError, TypeError) as e:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan module ABI reflection is malformed: {e}") from None
    check_abi_version(abi)   # NOTE: before anything else of the ABI is read: its layout is the version's
    try:
        target = parse_target(abi["target"])
    except (ValueError, KeyError, TypeError, HipdnnError) as e:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan module ABI reflection is malformed: {e}") from None
    if plan.payload_kind == _fusplan.KIND_MULTI_TARGET and str(target) != variants_raw[chosen][0]:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan index says its module {chosen} is for "
                                               f"{variants_raw[chosen][0]}, the module says {target}")
    ctx = IreeExecutionContext(body, abi, target, tensors_from_abi(abi), vm_module=module, in_place=in_place)
    # NOTE: plans written before the metadata said it: the target attribute IREE wrote into the module
    ctx.cpu_features = features[chosen] or (_features_in(body) if target.backend == "llvm-cpu" else "")
    if ctx.specialization is not None and module.lookup_function(ctx.specialization[0]) is None:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan module's ABI names a specialized function "
                                               f"'{ctx.specialization[0]}' the module does not have")
    if plan.metadata is not None:
        meta = plan.metadata
        ctx.compiler_version = meta.compiler_version.split(",")[0]
        if meta.engine_name:   # NOTE: plans before the third edition do not say their engine config
            ctx.engine_name = meta.engine_name
            try:
                knobs = json.loads(meta.engine_knobs or "{}")
            except ValueError:
                raise HipdnnError(Status.PLUGIN_ERROR, "FUSPLAN metadata engine_knobs is not JSON") from None
            if not isinstance(knobs, dict):
                raise HipdnnError(Status.PLUGIN_ERROR, "FUSPLAN metadata engine_knobs is not a JSON object")
            ctx.knobs = knobs
        if meta.shape_spec:
            from graph_ir.dynamic import ShapeSpec
            from graph_ir.desc import GraphError
            try:
                ctx.shape_spec = ShapeSpec.from_json(meta.shape_spec)
            except GraphError as e:
                raise to_hipdnn(e, "plan", "FUSPLAN metadata shape_spec is unreadable: ") from None
            except (ValueError, KeyError, TypeError) as e:
                raise HipdnnError(Status.PLUGIN_ERROR, f"FUSPLAN metadata shape_spec is unreadable: {e}") from None
            ctx.override = bool(info.get("is_override_shape_enabled", True))
            # NOTE: the module may come from a kernel cache (built at another graph's dims): the
            # plan's own dims are the spec's built dims
            ctx.tensors = [_at_built(t, ctx.shape_spec) for t in ctx.tensors]
    if plan.payload_kind == _fusplan.KIND_MULTI_TARGET:
        comp = ctx.compiler_version
        ctx.variants = tuple((parse_target(t), v, comp) for t, v in variants_raw)
        ctx.variant_features = {t: f for (t, _), f in zip(variants_raw, features) if f}
    if GRAPH_KEY in refl:   # NOTE: plans from older releases do not carry it (hipdnn_iree/backend/selfcheck.py)
        import base64
        try:
            ctx.op_graph = base64.b64decode(refl[GRAPH_KEY], validate=True)
        except ValueError:
            raise HipdnnError(Status.PLUGIN_ERROR, "plan module's graph reflection is not base64") from None
    session.load(ctx)
    return ctx
