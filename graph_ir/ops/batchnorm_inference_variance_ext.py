"""batchnorm_inference_variance_ext: its OpDef (being built: parsed and refused until its emitter, reference and frontend method exist)."""
from __future__ import annotations

from graph_ir.desc import ATTRS_BY_KIND, OpKind
from graph_ir.opdef import OpDef, register
from graph_ir.ops._parse_only import outputs_as_declared

OPDEF = register(OpDef(OpKind.BATCHNORM_INFERENCE_VARIANCE_EXT, ATTRS_BY_KIND[OpKind.BATCHNORM_INFERENCE_VARIANCE_EXT], outputs_as_declared, supported=False))
