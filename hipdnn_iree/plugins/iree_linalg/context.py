"""The IREE engine's execution context: one plan's module(s), ABI and runtime state."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from hipdnn_iree.plugin_sdk.buffers import BoundTensor
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType
from hipdnn_iree.plugins.iree_linalg.targets import Target
from lowering.abi import ABI_FORMAT_VERSION, REFLECTION_KEY, SUPPORTED_ABI_VERSIONS

ENGINE_NAME = "IREE_LINALG"


@dataclass
class IreeExecutionContext:
    vmfb: bytes
    abi: dict
    target: Target
    tensors: list[BoundTensor]
    module: object = None            # LoadedModule, None on a compile-only handle
    dispatch_count: int | None = None
    mlir: str | None = None
    compiler_version: str = ""
    view_cache: OrderedDict = field(default_factory=OrderedDict)
    reuse_views: bool = True         # remember bound packs in view_cache (the session's view_cache setting)
    staging: dict = field(default_factory=dict)          # uid -> (aligned array, its imported view)
    staging_lock: object = field(default_factory=threading.Lock)
    compile_flags: tuple = field(default_factory=tuple)
    variants: tuple = ()             # several-target plans: (Target, vmfb, compiler_version) of every module
    cpu_features: str = ""           # llvm-cpu: the "+" LLVM features the module's code needs (cpufeatures.py)
    variant_features: dict = field(default_factory=dict)   # several-target plans: str(Target) -> cpu_features
    vm_module: object = None         # restored: the VmModule made from vmfb (wrap_buffer: no copy)
    in_place: bool = False           # restored: vm_module uses the plan's own bytes (a mapped file) in place
    op_graph: bytes | None = None    # restored plans: the graph the module carries (self-check), if any
    policy: object = None            # built plans: the LoweringPolicy the module was lowered under
    engine_name: str = ENGINE_NAME   # the engine config the plan was built with (travels in FUSPLAN)
    knobs: dict = field(default_factory=dict)
    shape_spec: object = None        # dynamic plans: graph_ir.dynamic.ShapeSpec (which dims vary)
    override: bool = False           # execute takes other shapes (plugin_sdk/shapes.py resolves them)
    # specialized dynamic plans: (function name, {uid: (dims, strides)}): the static function of the
    # module's build shape, run when every bound tensor has exactly those (run.entry_for); from the ABI
    specialization: object = None

    def __post_init__(self):
        if self.specialization is None:
            self.specialization = specialization_of(self.abi)


def check_abi_version(abi: dict) -> None:
    """Refuses a module whose ABI reflection (``hipdnn_iree.abi``) is of a version this release
    does not read: VERSION_MISMATCH naming the version found and those supported (the module was
    written by another hipdnn-iree); a missing or non-integer version is PLUGIN_ERROR (malformed)."""
    version = abi.get("version") if isinstance(abi, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan module ABI reflection ({REFLECTION_KEY}) is malformed: its "
                                               f"version is {version!r}, not an integer")
    if version not in SUPPORTED_ABI_VERSIONS:
        from hipdnn_iree.plugin_sdk.version import __version__
        raise HipdnnError(Status.VERSION_MISMATCH,
                          f"plan module ABI ({REFLECTION_KEY}) is version {version}; this hipdnn-iree ({__version__}) "
                          f"reads ABI version{'s' if len(SUPPORTED_ABI_VERSIONS) > 1 else ''} "
                          f"{', '.join(map(str, SUPPORTED_ABI_VERSIONS))} (writes {ABI_FORMAT_VERSION}): the plan was "
                          "written by another release; restore it with that release, or rebuild it from its graph")


def specialization_of(abi: dict):
    """The ABI's ``specializations`` (lowering/_lower.py) as (entry, {uid: (dims, strides)}), else None."""
    specs = abi.get("specializations") if isinstance(abi, dict) else None
    if not specs:
        return None
    try:
        (one,) = specs
        table = {int(u): (tuple(int(d) for d in dims), tuple(int(s) for s in strides))
                 for u, dims, strides in one["tensors"]}
        entry = str(one["entry"])
    except (KeyError, TypeError, ValueError) as e:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan module reflection: specializations are malformed: {e!r}") from None
    return entry, table


def tensors_from_abi(abi: dict) -> list[BoundTensor]:
    try:
        ts = [BoundTensor(int(t["uid"]), str(t["name"]), str(t["role"]), int(DataType[t["data_type"]]),
                          tuple(int(d) for d in t["dims"]), tuple(int(s) for s in t["strides"]))
              for t in abi["tensors"]]
    except (KeyError, TypeError, ValueError) as e:
        raise HipdnnError(Status.PLUGIN_ERROR, f"plan module reflection is malformed: {e!r}") from None
    if [t for t in ts if t.role not in ("input", "output")]:
        raise HipdnnError(Status.PLUGIN_ERROR, "plan module reflection has a tensor role other than input/output")
    return ts
