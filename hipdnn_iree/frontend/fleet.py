"""Plans for a fleet: plan keys, restoring from a plan store, and building many plans at once.

``g.plan_key(target)`` names the finished plan of a graph for a target; ``hd.Graph.from_store(handle,
key)`` restores it from a plan store (``plugin_sdk/store.py``) with no compiler; :func:`build_many`
builds every (graph, target) pair, in local processes or as Ray tasks across a cluster, and writes
the plans (and, through each worker's handle, compiled modules and tuning results) to the store.

A plan key is the SHA-256 of the graph's hipDNN FlatBuffer bytes, the target (normalized:
``llvm-cpu`` is ``llvm-cpu:host``), the preferred engine, the override-shape setting and this
package's version (which pins the IREE release). It leaves the compiler's identity out, so a serving
machine with only the runtime computes the same key; the compile cache's keys (``module`` entries)
carry it.

Example:
    >>> import hipdnn_iree as hd                                                   # doctest: +SKIP
    >>> keys = hd.build_many([g1, g2], targets=["llvm-cpu:x86-64-v3", "rocm:gfx942"], store="redis://db:6379/0")
    >>> r = hd.Graph.from_store(hd.create_handle(store="redis://db:6379/0"), keys[(0, "llvm-cpu:x86-64-v3")])
"""
from __future__ import annotations

import hashlib
import struct

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.store import PlanStore

_PLAN_KEY_DOMAIN = b"hipdnn-iree plan key v1\0"


def normalize_target(target) -> str:
    """``target`` as a plan key sees it: ``"llvm-cpu"`` -> ``"llvm-cpu:host"``, ``cpu:``/``hip:`` -> ``llvm-cpu:``/``rocm:``;
    a list: comma-joined. Textual only (the engine checks the arch when it builds); a GPU target must
    name its arch (``cuda:sm_80``, ``rocm:gfx942``), else BAD_PARAM.

    NOTE: the frontend imports no engine package (tests/test_engine_configs.py); this is the target
    grammar of API.md, not the IREE engine's parser.
    """
    if isinstance(target, (list, tuple)) and target:
        return ",".join(normalize_target(t) for t in target)
    if not isinstance(target, str) or not target.strip():
        raise HipdnnError(Status.BAD_PARAM, f"target must be a string such as 'llvm-cpu:host', 'rocm:gfx942' or "
                                            f"'cuda:sm_80', got {target!r}")
    backend, _, arch = target.strip().partition(":")
    backend = {"cpu": "llvm-cpu", "hip": "rocm"}.get(backend, backend)
    if backend not in ("llvm-cpu", "rocm", "cuda"):
        raise HipdnnError(Status.NOT_SUPPORTED, f"target {target!r}: unknown backend {backend!r}; use llvm-cpu, "
                                                "rocm:<gfx> or cuda:<sm>")
    if backend == "llvm-cpu":
        arch = arch or "host"
    elif not arch:
        raise HipdnnError(Status.BAD_PARAM, f"target {target!r}: name the GPU arch (e.g. 'rocm:gfx942', 'cuda:sm_90')")
    return f"{backend}:{arch}"


def compute_plan_key(graph_bytes: bytes, target: str, engine_id, override: bool) -> str:
    from hipdnn_iree.plugin_sdk.version import __version__
    h = hashlib.sha256(_PLAN_KEY_DOMAIN)
    for part in (bytes(graph_bytes), target.encode(), str(engine_id).encode(), str(bool(override)).encode(),
                 __version__.encode()):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.hexdigest()


def autotune_resources(target: str) -> dict:
    """The Ray custom resource an autotune task for ``target`` asks for: ``{"gpu_sm_90": 1}``,
    ``{"gpu_gfx942": 1}``; none for CPU targets (a CPU core is enough). Start each GPU node with
    ``ray start ... --resources='{"gpu_sm_90": 1}'`` (one per GPU of that kind)."""
    backend, _, arch = normalize_target(target).partition(":")
    return {} if backend == "llvm-cpu" else {f"gpu_{arch}": 1}


class FleetOps:
    """``hd.Graph``'s plan-store methods (mixed into :class:`hd.Graph`)."""

    def plan_key(self, target) -> str:
        """The key a finished plan of this graph for ``target`` is stored under (module docstring).

        Example:
            >>> k = g.plan_key("rocm:gfx942")                                       # doctest: +SKIP
            >>> r = hd.Graph.from_store(handle, k)
        """
        self._check_not_restored("plan_key")
        from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
        # NOTE: no preference builds with IREE_LINALG (the serializable engine): the same key as preferring it
        engine = self._preferred if self._preferred is not None else engine_id_from_name("IREE_LINALG")
        return compute_plan_key(self.to_hipdnn_graph(), normalize_target(target), engine, self._override)

    @classmethod
    def from_store(cls, handle, key: str, verify_key=None):
        """Restores the plan stored under ``key`` (``g.plan_key(target)``, ``hd.build_many``) from the
        handle's plan store (``create_handle(store=...)``, ``HIPDNN_IREE_STORE``; else the default
        folder, ``hd.PlanStore()``). No compiler is involved.

        Raises:
            HipdnnError: NOT_SUPPORTED naming the key when the store has no (valid) plan under it;
                INTERNAL_ERROR naming the store when it cannot be reached; as ``from_compiled_plan``
                for a plan this handle cannot run.
        """
        store = getattr(handle, "store", None) or PlanStore()
        data = store.get("plan", key)
        if data is None:
            raise HipdnnError(Status.NOT_SUPPORTED, f"plan store {store.url} has no plan under key {key}: build it "
                                                    "first (hd.build_many, or hipdnn-iree compile --store)")
        return cls.from_compiled_plan(handle, data, verify_key)


__all__ = ["FleetOps", "autotune_resources", "compute_plan_key", "normalize_target"]
