"""Public enums. Values equal the ones written into ``schemas/graph.fbs``."""
from __future__ import annotations

import enum

from lowering._fbs import graph_generated as _g


def _from_schema(name: str, schema_cls, doc: str) -> type[enum.IntEnum]:
    members = {k: v for k, v in vars(schema_cls).items() if not k.startswith("_") and isinstance(v, int)}
    cls = enum.IntEnum(name, members, module=__name__)
    cls.__doc__ = doc
    return cls


DataType = _from_schema("DataType", _g.DataType, "Tensor element types (hipDNN's names).")
PointwiseMode = _from_schema("PointwiseMode", _g.PointwiseMode, "Pointwise operations (hipDNN's names).")
ReductionMode = _from_schema("ReductionMode", _g.ReductionMode, "Reduction operations (hipDNN's names).")
NormFwdPhase = _from_schema("NormFwdPhase", _g.NormFwdPhase, "Normalization forward phase.")
