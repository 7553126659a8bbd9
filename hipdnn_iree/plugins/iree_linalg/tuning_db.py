"""The tuning database: autotuned knobs per (graph, target, device), beside the compile cache.

``g.autotune(...)`` times a graph's engine configs on the handle's device and stores the fastest
config's knobs here; a later ``build()`` of the same graph (the same hipDNN graph bytes) for the same
target on the same kind of device takes them without timing (``HeurMode.A``), as MIOpen's find-db
serves its perf-db entries.

One JSON file, ``tuning.json`` in the compile cache's folder (``HIPDNN_IREE_CACHE_DIR``, or the
handle's ``cache=`` folder), written atomically (a temporary file renamed over it). A damaged or
unreadable file counts as empty (tuning is an optimisation: it never makes a build fail).

With a plan store on the handle (``plugin_sdk/store.py``), each result is also written to the store's
``tuning`` namespace under :func:`entry_key` (one JSON entry per graph, target and device kind), and a
graph with no local result takes the store's: winners tuned on one machine serve every machine
with that kind of device.

Example:
    >>> import tempfile
    >>> db = TuningDb(tempfile.mkdtemp())
    >>> db.store(b"graph", "llvm-cpu:host", "cpu:test", {"SDPA_FORM": "FUSED"}, [(0, 1.5), (1, 1.2)])
    >>> db.lookup(b"graph", "llvm-cpu:host", "cpu:test")
    {'SDPA_FORM': 'FUSED'}
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import tempfile
import threading
import time

FILE_NAME = "tuning.json"
# History: 1 (2026-12-01) {"version": 1, "entries": {key: {"knobs", "timings_ms", "graph", "target", "device", "when"}}}
DB_VERSION = 1
_LOCK = threading.Lock()


def entry_key(op_graph: bytes, target: str, device: str) -> str:
    h = hashlib.sha256(b"hipdnn-iree tuning\0")
    for part in (bytes(op_graph), target.encode(), device.encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def device_identity(device_uri: str | None) -> str:
    """What kind of device runs the plans: the CPU model and core count on CPU drivers, the GPU's
    name as IREE's driver reports it on GPUs. Plans tuned on one H200 serve another H200."""
    if device_uri is None:
        return "none"
    driver = device_uri.split("://", 1)[0]
    if driver in ("local-task", "local-sync"):
        model = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("model name"):
                        model = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        return f"{driver}:{model}:{os.cpu_count()}cores"
    try:
        from hipdnn_iree.plugins.iree_linalg.runtime import rt
        infos = rt().get_driver(driver).query_available_devices()
        index = 0
        if "://" in device_uri and device_uri.split("://", 1)[1].isdigit():
            index = int(device_uri.split("://", 1)[1])
        info = infos[index] if index < len(infos) else (infos[0] if infos else {})
        return f"{driver}:{info.get('name', '?')}"
    except Exception:   # NOTE: an identity that matches nothing stored: tuning is skipped, never fatal
        return f"{driver}:unknown"


class TuningDb:
    """The tuning database in ``folder`` (see module docstring)."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, FILE_NAME)

    def _read(self) -> dict:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            if isinstance(data, dict) and data.get("version") == DB_VERSION and isinstance(data.get("entries"), dict):
                return data
        except (OSError, ValueError):
            pass
        return {"version": DB_VERSION, "entries": {}}

    def lookup(self, op_graph: bytes, target: str, device: str) -> dict | None:
        entry = self._read()["entries"].get(entry_key(op_graph, target, device))
        knobs = entry.get("knobs") if isinstance(entry, dict) else None
        return dict(knobs) if isinstance(knobs, dict) else None

    def store(self, op_graph: bytes, target: str, device: str, knobs: dict, timings: list, graph_name: str = "") -> bool:
        """Records the tuned knobs; False (and nothing written) when the folder is not writable."""
        with _LOCK:
            data = self._read()
            data["entries"][entry_key(op_graph, target, device)] = {
                "knobs": dict(knobs), "timings_ms": [[int(i), float(t)] for i, t in timings],
                "graph": graph_name, "target": target, "device": device,
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            folder = os.path.dirname(self.path)
            try:
                os.makedirs(folder, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=".tuning.", suffix=".tmp", dir=folder)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(data, f, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
            except OSError:
                return False
            return True

    def entries(self) -> dict:
        return dict(self._read()["entries"])


def _entry_json(target: str, device: str, knobs: dict, timings: list, graph_name: str) -> dict:
    return {"knobs": dict(knobs), "timings_ms": [[int(i), float(t)] for i, t in timings], "graph": graph_name,
            "target": target, "device": device, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def store_record(store, op_graph: bytes, target: str, device: str, knobs: dict, timings: list,
                 graph_name: str = "") -> bool:
    """Writes a tuning result to the plan store (replacing an older one); False when not written."""
    entry = dict(_entry_json(target, device, knobs, timings, graph_name), version=DB_VERSION)
    return store.try_put("tuning", entry_key(op_graph, target, device),
                         json.dumps(entry, sort_keys=True).encode("utf-8"))


def store_lookup(store, op_graph: bytes, target: str, device: str) -> dict | None:
    """The plan store's tuned knobs for this graph, target and device kind, or None."""
    data = store.try_get("tuning", entry_key(op_graph, target, device))
    if data is None:
        return None
    try:
        entry = json.loads(data.decode("utf-8"))
    except ValueError:
        return None
    knobs = entry.get("knobs") if isinstance(entry, dict) else None
    return dict(knobs) if isinstance(knobs, dict) else None
