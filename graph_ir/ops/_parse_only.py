"""OpDefs of the hipDNN node types this project parses but does not lower (``supported=False``), one
per entry of ``graph_ir.desc.PARSE_ONLY``: outputs keep the dims the graph gives (a hipDNN graph sets
them all) and ``unsupported_reason`` refuses the node by name."""
from __future__ import annotations

from graph_ir.desc import ATTRS_BY_KIND, PARSE_ONLY
from graph_ir.opdef import OpDef, register


def outputs_as_declared(node, dims) -> dict:
    return {}


for _kind in PARSE_ONLY:
    register(OpDef(_kind, ATTRS_BY_KIND[_kind], outputs_as_declared, supported=False))
