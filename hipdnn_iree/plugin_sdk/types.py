"""Public enums. Values equal the ones written into ``schemas/graph.fbs``."""
from __future__ import annotations

import enum

from lowering._fbs import graph_generated as _g


class NamedIntEnum(enum.IntEnum):
    """An IntEnum that prints as ``DataType.FLOAT``, not as a bare number (Python 3.11's IntEnum
    ``str()`` is the integer's)."""

    __str__ = enum.Enum.__str__
    __format__ = enum.Enum.__format__


def _from_schema(name: str, schema_cls, doc: str) -> type[enum.IntEnum]:
    members = {k: v for k, v in vars(schema_cls).items() if not k.startswith("_") and isinstance(v, int)}
    cls = NamedIntEnum(name, members, module=__name__)
    cls.__doc__ = doc
    return cls


DataType = _from_schema("DataType", _g.DataType, "Tensor element types (hipDNN's names).")
PointwiseMode = _from_schema("PointwiseMode", _g.PointwiseMode, "Pointwise operations (hipDNN's names).")
ReductionMode = _from_schema("ReductionMode", _g.ReductionMode, "Reduction operations (hipDNN's names).")
NormFwdPhase = _from_schema("NormFwdPhase", _g.NormFwdPhase, "Normalization forward phase.")


def as_enum(cls, value, what: str):
    """``value`` as a member of ``cls`` (a member or its number), else BAD_PARAM naming ``what``.

    Example:
        >>> as_enum(DataType, 1, "tensor 'x': data_type")
        <DataType.FLOAT: 1>
    """
    from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
    if isinstance(value, cls):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return cls(value)
        except ValueError:
            pass
    names = ", ".join(m.name for m in cls if m.name != "NOT_SET")
    raise HipdnnError(Status.BAD_PARAM, f"{what} must be an hd.{cls.__name__} ({names}), got {value!r}")
