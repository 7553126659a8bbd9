"""op kind -> numpy reference implementation; each op module registers itself here."""
from __future__ import annotations

from typing import Callable

from graph_ir.desc import OpKind

REFERENCES: dict[OpKind, Callable] = {}


def register_reference(kind: OpKind):
    def wrap(fn):
        if kind in REFERENCES:
            raise RuntimeError(f"duplicate reference for {kind.name}")
        REFERENCES[kind] = fn
        return fn
    return wrap
