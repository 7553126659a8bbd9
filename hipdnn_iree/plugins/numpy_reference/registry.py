"""op kind -> numpy reference implementation; each op module registers itself here."""
from __future__ import annotations

from typing import Callable

from graph_ir.desc import OpKind
from graph_ir.opdef import check_complete

REFERENCES: dict[OpKind, Callable] = {}


def register_reference(kind: OpKind):
    def wrap(fn):
        if kind in REFERENCES:
            raise RuntimeError(f"duplicate reference for {kind.name}")
        REFERENCES[kind] = fn
        return fn
    return wrap


# modules of this package that are not op references
_NOT_OPS = {"__init__", "plugin", "registry"}


def import_op_modules() -> None:
    """Imports every op module of this package (each registers its references): a new op is one new file."""
    import importlib
    import os
    import pkgutil
    package = __name__.rpartition(".")[0]
    for m in sorted(m.name for m in pkgutil.iter_modules([os.path.dirname(__file__)])):
        if m not in _NOT_OPS:
            importlib.import_module(f"{package}.{m}")


def check_references() -> None:
    """Raises naming every supported OpDef (graph_ir.opdef.OPS) that has no reference here; run when
    the package has imported every op module (``__init__``)."""
    check_complete("numpy reference (REFERENCES, plugins/numpy_reference/)", REFERENCES)
