"""What a plan file holds, read without a device or the compiler (``hipdnn-iree inspect``).

Layers: the envelope (``_envelope``), the FUSPLAN header (``plugins/_fusplan``) and the
``.vmfb``, which is a zip archive: ``module.fb`` (the VM bytecode FlatBuffer) plus one
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

from hipdnn_iree import _envelope
from hipdnn_iree._status import HipdnnError, Status

ABI_KEY = "hipdnn_iree.abi"
DECLARATION_KEY = "iree.abi.declaration"
_TARGET_RE = re.compile(rb'#hal\.executable\.target<"([\w.-]+)", "([\w.-]+)"(?:, \{(.{0,4096}?)\})?>', re.S)
_ATTR_RE = re.compile(rb'\b(cpu|arch|target_triple) = "([^"]*)"')


@dataclass
class PlanInfo:
    """A plan file, layer by layer. ``abi`` is the module's ``hipdnn_iree.abi`` reflection."""

    file_bytes: int
    envelope: _envelope.Envelope
    engine_name: str
    fusplan: object = None                  # plugins._fusplan.Fusplan (IREE engine plans)
    vmfb: bytes = b""
    entry: str = "main"
    functions: list[str] = field(default_factory=list)
    abi: dict = field(default_factory=dict)
    declaration: str = ""
    reflection: dict = field(default_factory=dict)
    executables: list[dict] = field(default_factory=list)     # {"name", "bytes"}
    targets: list[dict] = field(default_factory=list)         # {"backend", "format", "cpu"/"arch", ...}
    module_fb_bytes: int = 0                                  # the VM bytecode FlatBuffer inside the .vmfb
    signature_verified: bool = False                          # read with a verify key, and the signature matched

    @property
    def target(self) -> str:
        """The hipdnn-iree target string the plan was built for (``llvm-cpu:host``, ``rocm:gfx942``)."""
        return str(self.abi.get("target") or self.envelope.target_arch or "")

    @property
    def tensors(self) -> list[dict]:
        return list(self.abi.get("tensors", []))

    def as_dict(self) -> dict:
        env = self.envelope
        head = self.fusplan
        return {
            "file_bytes": self.file_bytes,
            "envelope": {"version": env.version, "engine_id": env.engine_id, "engine_name": self.engine_name,
                         "workspace_size": env.workspace_size, "tensor_uids": list(env.tensor_uids),
                         "plugin_payload_bytes": len(env.plugin_payload), "plugin_name": env.plugin_name,
                         "plugin_version": env.plugin_version, "producer_version": env.producer_version,
                         "compiler_version": env.compiler_version, "target_device": env.target_device,
                         "target_arch": env.target_arch, "payload_sha256": env.payload_sha256.hex(),
                         "signed": bool(env.signature), "signature_verified": self.signature_verified},
            "fusplan": None if head is None else {
                "format_major": head.format_major, "format_minor": head.format_minor,
                "payload_kind": head.payload_kind, "header_bytes": len(env.plugin_payload) - len(head.body)},
            "module": None if not self.vmfb else {
                "vmfb_bytes": len(self.vmfb), "module_fb_bytes": self.module_fb_bytes, "entry": self.entry, "functions": self.functions,
                "declaration": self.declaration, "abi": self.abi, "targets": self.targets,
                "executables": self.executables},
        }


def engine_names() -> dict[int, str]:
    """engine id -> name for the installed plugins (and the two shipped engines)."""
    from hipdnn_iree._engine_ids import engine_id_from_name
    names = {engine_id_from_name(n): n for n in ("IREE_LINALG", "NUMPY_REFERENCE")}
    try:
        from hipdnn_iree._handle import discover_plugins
        for p in discover_plugins():
            names.update({int(k): str(v) for k, v in (getattr(p, "engine_names", None) or {}).items()})
    except HipdnnError:
        pass   # NOTE: a broken third-party plugin must not stop inspecting a plan
    return names


def read_plan(data: bytes, verify_key=None) -> PlanInfo:
    """Parses every layer of ``data``; a bad layer raises HipdnnError (BAD_PARAM/NOT_SUPPORTED/PLUGIN_ERROR)."""
    env = _envelope.decode(data, verify_key)
    info = PlanInfo(len(data), env, engine_names().get(env.engine_id, "unknown (no installed plugin serves it)"))
    # NOTE: decode() refuses unsigned or badly signed plans when a key is given, so reaching here
    # with a key means the signature was checked and matched.
    info.signature_verified = verify_key is not None
    from hipdnn_iree.plugins import _fusplan
    try:
        info.fusplan = _fusplan.unpack(env.plugin_payload)
    except _fusplan.FusplanError as e:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plugin payload: {e}") from None
    info.vmfb = info.fusplan.body
    _read_module(info)
    _read_archive(info)
    return info


def _read_module(info: PlanInfo) -> None:
    from hipdnn_iree.plugins._iree_rt import instance, rt
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
    if ABI_KEY not in refl:
        raise HipdnnError(Status.PLUGIN_ERROR, "plan module has no hipdnn_iree ABI reflection: it was not written "
                                               "by hipdnn-iree")
    try:
        info.abi = json.loads(refl[ABI_KEY])
        if not isinstance(info.abi, dict) or not isinstance(info.abi.get("tensors"), list):
            raise ValueError("no tensors list")
    except ValueError as e:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan module ABI reflection is malformed: {e}") from None


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
    out = [f"plan: {info.file_bytes} bytes",
           f"envelope: version {env['version']}, engine {env['engine_name']} (id {env['engine_id']}), "
           f"workspace {env['workspace_size']} bytes, payload {env['plugin_payload_bytes']} bytes",
           f"  tensor uids: {env['tensor_uids']}"]
    if env["version"] >= 2:
        out += [f"  written by: {env['plugin_name']} {env['plugin_version']} (hipdnn-iree {env['producer_version']}), "
                f"IREE compiler {env['compiler_version'] or '?'}",
                f"  target: device {env['target_device'] or '?'}, arch {env['target_arch'] or '?'}",
                f"  payload sha256: {env['payload_sha256']} (checked); signature: "
                f"{_signature_text(env)}"]
    if head is not None:
        out.append(f"FUSPLAN: format {head['format_major']}.{head['format_minor']}, payload kind "
                   f"{head['payload_kind']} (IREE .vmfb), header {head['header_bytes']} bytes")
    if mod is not None:
        exe_bytes = sum(e["bytes"] for e in mod["executables"])
        out += [f"module: {mod['vmfb_bytes']} bytes (bytecode {mod['module_fb_bytes']}, executables {exe_bytes}), "
                f"functions {mod['functions']}, entry '{mod['entry']}'",
                f"  signature: {mod['declaration'] or '(none)'}",
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
