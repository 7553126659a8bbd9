"""Op kind -> lowering function registry (duplicates fail loudly)."""
from __future__ import annotations

from typing import Callable

from graph_ir.desc import OpKind

LOWERINGS: dict[OpKind, Callable] = {}


def register_lowering(kind: OpKind):
    def wrap(fn):
        if kind in LOWERINGS:
            raise RuntimeError(f"duplicate lowering for {kind.name}: {LOWERINGS[kind].__name__} and {fn.__name__}")
        LOWERINGS[kind] = fn
        return fn
    return wrap
