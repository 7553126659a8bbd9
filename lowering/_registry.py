"""Op kind -> lowering function registry (duplicates fail loudly)."""
from __future__ import annotations

from typing import Callable

from graph_ir.desc import OpKind
from graph_ir.opdef import check_complete

LOWERINGS: dict[OpKind, Callable] = {}


def register_lowering(kind: OpKind):
    def wrap(fn):
        if kind in LOWERINGS:
            raise RuntimeError(f"duplicate lowering for {kind.name}: {LOWERINGS[kind].__name__} and {fn.__name__}")
        LOWERINGS[kind] = fn
        return fn
    return wrap


def check_lowerings() -> None:
    """Raises naming every supported OpDef (graph_ir.opdef.OPS) that has no emitter here; run when
    ``lowering.ops`` has imported every emitter module."""
    check_complete("lowering (LOWERINGS, lowering/ops/)", LOWERINGS)
