"""What an IREE engine plan holds, read without a device or the compiler (``hipdnn-iree inspect``):
the plugin hook ``describe_payload`` behind ``hipdnn_iree/backend/plan_info.py``.

Layers: the envelope (``_envelope``), the FUSPLAN header and metadata (``plugins/_fusplan``;
kind 3 adds an index of one module per target) and the ``.vmfb``, which is a zip archive: ``module.fb`` (the VM bytecode FlatBuffer) plus one
member per compiled executable. The module's entry function carries the hipdnn-iree ABI
(``hipdnn_iree.abi`` JSON: uid, role, data type, dims, strides of each bound tensor) and
IREE's own ``iree.abi.declaration`` as reflection metadata.
"""
from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass, field

from hipdnn_iree.plugin_sdk.errors import to_hipdnn
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.iree_linalg.context import check_abi_version
from lowering.abi import ENTRY_POINT, REFLECTION_KEY

DECLARATION_KEY = "iree.abi.declaration"
_TARGET_RE = re.compile(rb'#hal\.executable\.target<"([\w.-]+)", "([\w.-]+)"(?:, \{(.{0,4096}?)\})?>', re.S)
_ATTR_RE = re.compile(rb'\b(cpu|arch|target_triple) = "([^"]*)"')


@dataclass
class PlanInfo:
    """A plan file, layer by layer. ``abi`` is the module's ``hipdnn_iree.abi`` reflection."""

    file_bytes: int
    envelope: object                        # the backend's decoded envelope (its fields are read)
    engine_name: str
    fusplan: object = None                  # plugins._fusplan.Fusplan (IREE engine plans)
    vmfb: bytes = b""
    entry: str = ENTRY_POINT
    functions: list[str] = field(default_factory=list)
    abi: dict = field(default_factory=dict)
    declaration: str = ""
    reflection: dict = field(default_factory=dict)
    executables: list[dict] = field(default_factory=list)     # {"name", "bytes"}
    targets: list[dict] = field(default_factory=list)         # {"backend", "format", "cpu"/"arch", ...}
    module_fb_bytes: int = 0                                  # the VM bytecode FlatBuffer inside the .vmfb
    signature_verified: bool = False                          # read with a verify key, and the signature matched
    entries: list[dict] = field(default_factory=list)         # kind 3: {"target", "device", "offset", "bytes", ...}
    graph: dict | None = None                                 # kind 1: {"name", "bytes", "nodes": [...]}

    @property
    def identity(self) -> dict:
        """Who wrote the plan, for what: FUSPLAN 1.1 metadata, else a 0.1.0 version-2 envelope."""
        meta = getattr(self.fusplan, "metadata", None)
        src = meta if meta is not None else self.envelope
        out = {k: getattr(src, k) for k in ("plugin_name", "plugin_version", "producer_version", "compiler_version",
                                            "target_device", "target_arch")}
        out["sha256"] = (meta.body_sha256 if meta is not None else self.envelope.payload_sha256).hex()
        out["signed"] = bool(meta.signature if meta is not None else self.envelope.signature)
        out["source"] = ("FUSPLAN metadata" if meta is not None else
                         "envelope version 2" if self.envelope.version >= 2 else "none (FUSPLAN 1.0 in envelope v1)")
        return out

    @property
    def engine_config(self) -> dict | None:
        """The engine config the plan was built with (third-edition plans), else None."""
        meta = getattr(self.fusplan, "metadata", None)
        if meta is None or not getattr(meta, "engine_name", ""):
            return None
        try:
            knobs = json.loads(meta.engine_knobs or "{}")
        except ValueError:
            knobs = {}
        return {"engine_name": meta.engine_name, "knobs": knobs}

    @property
    def shape_spec(self) -> dict | None:
        """Override-shape plans: {"varying": {uid: [dims]}, "allowed": {uid: {dim: text}}}, else None."""
        meta = getattr(self.fusplan, "metadata", None)
        text = getattr(meta, "shape_spec", "") if meta is not None else ""
        if not text:
            return None
        try:
            from graph_ir.dynamic import ShapeSpec
            spec = ShapeSpec.from_json(text)
            varying = {int(u): sorted(int(d) for d in ds) for u, ds in spec.varying().items()}
            allowed = {}
            for t in self.tensors:
                u = int(t.get("uid"))
                allowed[u] = {i: spec.allowed(u, i) for i in range(len(t.get("dims", [])))}
        except Exception as e:   # NOTE: inspect reports what it can; restore refuses an unreadable spec
            return {"error": f"{type(e).__name__}: {e}", "json": text}
        return {"varying": varying, "allowed": allowed}

    @property
    def target(self) -> str:
        """The hipdnn-iree target string the plan was built for (``llvm-cpu:host``, ``rocm:gfx942``)."""
        return str(self.abi.get("target") or self.envelope.target_arch or "")

    def text(self) -> str:
        return format_text(self)

    @property
    def tensors(self) -> list[dict]:
        return list(self.abi.get("tensors", []))

    def as_dict(self) -> dict:
        env = self.envelope
        head = self.fusplan
        ident = self.identity
        return {
            "file_bytes": self.file_bytes,
            # NOTE: the identity keys stay under "envelope" (where 0.1.0 had them) for scripts that read them;
            # "identity_source" says where they came from.
            "envelope": {"version": env.version, "layout": env.layout, "engine_id": env.engine_id,
                         "engine_name": self.engine_name,
                         "workspace_size": env.workspace_size, "tensor_uids": list(env.tensor_uids),
                         "plugin_payload_bytes": len(env.plugin_payload), "payload_offset": env.payload_offset,
                         **{k: ident[k] for k in ("plugin_name", "plugin_version", "producer_version",
                                                  "compiler_version", "target_device", "target_arch")},
                         "payload_sha256": ident["sha256"], "identity_source": ident["source"],
                         "signed": ident["signed"], "signature_verified": self.signature_verified},
            "fusplan": None if head is None else {
                "format_major": head.format_major, "format_minor": head.format_minor,
                "payload_kind": head.payload_kind, "header_bytes": head.header_size,
                "body_offset_in_file": env.payload_offset + head.header_size, "body_bytes": len(head.body),
                "entries": self.entries},
            "graph": self.graph,
            "engine_config": self.engine_config,
            "is_override_shape_enabled": bool(getattr(env, "is_override_shape_enabled", False)),
            "shape_spec": self.shape_spec,
            "module": None if not self.vmfb else {
                "vmfb_bytes": len(self.vmfb), "module_fb_bytes": self.module_fb_bytes, "entry": self.entry, "functions": self.functions,
                "declaration": self.declaration, "abi": self.abi, "targets": self.targets,
                "executables": self.executables},
        }


def describe_payload(env, file_bytes: int, engine_name: str, legacy: bool, verify_key=None) -> PlanInfo:
    """Parses the payload of a decoded envelope ``env``; a bad layer raises HipdnnError
    (BAD_PARAM/NOT_SUPPORTED/PLUGIN_ERROR). ``legacy``: a 0.1.0 envelope (it checked its own signature)."""
    info = PlanInfo(file_bytes, env, engine_name)
    from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
    try:
        # NOTE: decode() checked a 0.1.0 envelope's signature; FUSPLAN 1.1 checks its own here. Either
        # refuses unsigned or badly signed plans when a key is given, so reaching the end with a key
        # means the signature was checked and matched.
        info.fusplan = _fusplan.unpack(env.plugin_payload, None if legacy else verify_key,
                                       _fusplan.envelope_fields(env.engine_id, env.workspace_size, env.tensor_uids))
    except _fusplan.FusplanSignatureError as e:
        raise HipdnnError(Status.BAD_PARAM, str(e)) from None
    except _fusplan.FusplanError as e:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plugin payload: {e}") from None
    except TypeError as e:
        raise HipdnnError(Status.BAD_PARAM, f"verify_key: {e}") from None
    info.signature_verified = verify_key is not None
    head = info.fusplan
    if head.payload_kind == _fusplan.KIND_GRAPH_FLATBUFFER:
        _read_graph(info, bytes(head.body))
        return info
    if head.payload_kind == _fusplan.KIND_MULTI_TARGET:
        body_at = env.payload_offset + head.header_size
        for e in head.entries:
            sub = PlanInfo(info.file_bytes, env, info.engine_name, head, bytes(head.module(e)))
            _read_module(sub)
            _read_archive(sub)
            info.entries.append({"target": e.target, "device": e.target_device, "offset_in_file": body_at + e.offset,
                                 "bytes": e.size, "sha256": e.sha256.hex(),
                                 "executable_formats": sorted({t["format"] for t in sub.targets}),
                                 "abi_target": sub.abi.get("target", "")})
        info.vmfb = bytes(head.module(head.entries[0]))
    else:
        info.vmfb = bytes(head.body)
    _read_module(info)
    _read_archive(info)
    return info


def _read_graph(info: PlanInfo, graph: bytes) -> None:
    """A kind-1 plan: the hipDNN graph it holds (compiled when restored); tensors as the ABI would list them."""
    from graph_ir.desc import TABLE_NAMES, GraphError, decode_graph
    try:
        desc = decode_graph(graph)
    except GraphError as e:
        raise to_hipdnn(e, "plan", "plugin payload: FUSPLAN kind 1: the hipDNN graph it holds cannot "
                                   "be read: ") from None
    from graph_ir.dtypes import data_type_name
    produced = desc.output_uids()
    info.graph = {"name": desc.name, "bytes": len(graph),
                  "nodes": [{"name": n.name, "type": TABLE_NAMES.get(int(n.kind), str(int(n.kind)))}
                            for n in desc.nodes]}
    info.abi = {"graph": desc.name, "target": "", "tensors": [
        {"uid": t.uid, "name": t.name, "role": "output" if t.uid in produced else "input", "arg": i,
         "data_type": data_type_name(t.data_type), "dims": list(t.dims), "strides": list(t.strides)}
        for i, t in enumerate(desc.bound_tensors())]}


def _read_module(info: PlanInfo) -> None:
    from hipdnn_iree.plugins.iree_linalg.runtime import instance, rt
    try:
        module = rt().VmModule.copy_buffer(instance(), info.vmfb)
        info.functions = list(module.function_names)
        refl = {}
        fn = module.lookup_function(info.entry)
        if fn is not None:
            refl = dict(fn.reflection)
    except Exception as e:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan payload is not a loadable IREE module "
                                               f"({len(info.vmfb)} bytes): {e}") from None
    if fn is None:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan module has no entry function '{info.entry}' "
                                               f"(functions: {info.functions})")
    info.reflection = refl
    info.declaration = str(refl.get(DECLARATION_KEY, ""))
    if REFLECTION_KEY not in refl:
        raise HipdnnError(Status.PLUGIN_ERROR, "plan module has no hipdnn_iree ABI reflection: it was not written "
                                               "by hipdnn-iree")
    try:
        info.abi = json.loads(refl[REFLECTION_KEY])
        if not isinstance(info.abi, dict) or not isinstance(info.abi.get("tensors"), list):
            raise ValueError("no tensors list")
    except ValueError as e:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan module ABI reflection is malformed: {e}") from None
    check_abi_version(info.abi)


def _read_archive(info: PlanInfo) -> None:
    """Executables (zip members) and their targets (``#hal.executable.target`` in module.fb)."""
    fb = b""
    try:
        with zipfile.ZipFile(io.BytesIO(info.vmfb)) as z:
            for m in z.infolist():
                if m.filename == "module.fb":
                    fb = z.read(m)
                    info.module_fb_bytes = m.file_size
                else:
                    info.executables.append({"name": m.filename, "bytes": m.file_size})
    except (zipfile.BadZipFile, OSError, ValueError):
        fb = info.vmfb   # NOTE: not every .vmfb is a zip (e.g. without embedded executables)
    seen = set()
    for backend, fmt, attrs in _TARGET_RE.findall(fb):
        t = {"backend": backend.decode(), "format": fmt.decode()}
        for k, v in _ATTR_RE.findall(attrs or b""):
            t.setdefault(k.decode(), v.decode())
        key = tuple(sorted(t.items()))
        if key not in seen:
            seen.add(key)
            info.targets.append(t)


def _signature_text(env: dict) -> str:
    if env["signature_verified"]:
        return "present, verified with the given key (HMAC-SHA256)"
    return "present, not verified (pass --verify-key-file)" if env["signed"] else "none"


def format_text(info: PlanInfo) -> str:
    """The human-readable report of ``hipdnn-iree inspect``."""
    d = info.as_dict()
    env, head, mod = d["envelope"], d["fusplan"], d["module"]
    from hipdnn_iree.plugins.iree_linalg.fusplan import KIND_NAMES
    out = [f"plan: {info.file_bytes} bytes",
           f"envelope: version {env['version']} ({env['layout']} layout), engine {env['engine_name']} "
           f"(id {env['engine_id']}), workspace {env['workspace_size']} bytes, payload {env['plugin_payload_bytes']} "
           f"bytes at offset {env['payload_offset']}",
           f"  tensor uids: {env['tensor_uids']}"]
    if d.get("engine_config"):
        cfg = d["engine_config"]
        out.append(f"engine config: {cfg['engine_name']}, knobs "
                   + (", ".join(f"{k}={v}" for k, v in sorted(cfg["knobs"].items())) or "none (the defaults)"))
    spec = d.get("shape_spec")
    if d.get("is_override_shape_enabled") or spec:
        out.append("override shapes: enabled (envelope slot 5 is_override_shape_enabled = true)"
                   if d.get("is_override_shape_enabled") else
                   "dynamic shapes: the module takes the dims below; this plan runs at its built dims "
                   "(override shapes not enabled: envelope slot 5 absent)")
        if spec and "varying" in spec:
            for u, dims in sorted(spec["allowed"].items()):
                vary = spec["varying"].get(u, [])
                out.append(f"  uid {u}: " + ("; ".join(f"dim {i}: {a}" for i, a in sorted(dims.items()))
                                             if vary else "all dims fixed"))
        elif spec:
            out.append(f"  shape spec unreadable: {spec['error']}")
    if head is not None:
        out.append(f"FUSPLAN: format {head['format_major']}.{head['format_minor']}, payload kind "
                   f"{head['payload_kind']} ({KIND_NAMES.get(head['payload_kind'], '?')}), header "
                   f"{head['header_bytes']} bytes, body {head['body_bytes']} bytes at file offset "
                   f"{head['body_offset_in_file']}")
    if env["identity_source"].startswith(("FUSPLAN", "envelope")):
        out += [f"  written by: {env['plugin_name']} {env['plugin_version']} (hipdnn-iree {env['producer_version']}), "
                f"IREE compiler {env['compiler_version'] or '?'} [from the {env['identity_source']}]",
                f"  target: device {env['target_device'] or '-'}, arch {env['target_arch'] or '?'}",
                f"  sha256: {env['payload_sha256']} (checked); signature: {_signature_text(env)}"]
    if head is not None and head["entries"]:
        out.append(f"  modules: {len(head['entries'])}, one per target")
        for i, e in enumerate(head["entries"]):
            out.append(f"    [{i}] {e['target']:22} device {e['device']:5} {e['bytes']:>9} bytes at file offset "
                       f"{e['offset_in_file']} ({', '.join(e['executable_formats'])})")
    if d["graph"] is not None:
        gr = d["graph"]
        out += [f"graph: '{gr['name']}', {gr['bytes']} bytes, hipDNN graph FlatBuffer: compiled when restored "
                "(needs the IREE compiler); 'hipdnn-iree upgrade' writes a compiled plan",
                "  nodes: " + ", ".join(f"{n['name']} ({n['type']})" for n in gr["nodes"]), "  tensors:"]
        for t in info.tensors:
            out.append(f"    uid {t['uid']}: {t['role']:6} {t['name']!r} {t['data_type']} dims {t['dims']} "
                       f"strides {t['strides']}")
    if mod is not None:
        exe_bytes = sum(e["bytes"] for e in mod["executables"])
        out += [f"module{' [0]' if head and head['entries'] else ''}: {mod['vmfb_bytes']} bytes (bytecode {mod['module_fb_bytes']}, executables {exe_bytes}), "
                f"functions {mod['functions']}, entry '{mod['entry']}'",
                f"  signature: {mod['declaration'] or '(none)'}",
                *[f"  shape specialization: '{sp.get('entry')}' (static code) runs calls whose tensors all have "
                  "these dims and strides, 'main' every other shape: "
                  + "; ".join(f"uid {u} {list(d)}" for u, d, _ in sp.get("tensors", []))
                  for sp in (info.abi.get("specializations") or []) if isinstance(sp, dict)],
                f"  built for: {info.target or '?'} (graph '{info.abi.get('graph', '?')}', ABI version "
                f"{info.abi.get('version', '?')})"]
        for t in mod["targets"]:
            extra = ", ".join(f"{k} {v}" for k, v in t.items() if k not in ("backend", "format"))
            out.append(f"  executable target: {t['backend']} / {t['format']}" + (f" ({extra})" if extra else ""))
        for e in mod["executables"]:
            out.append(f"  executable: {e['name']} ({e['bytes']} bytes)")
        out.append("  tensors:")
        for t in info.tensors:
            out.append(f"    uid {t.get('uid')}: {t.get('role', '?'):6} {t.get('name', '')!r} {t.get('data_type')} "
                       f"dims {t.get('dims')} strides {t.get('strides')} (arg {t.get('arg')})")
    return "\n".join(out)
