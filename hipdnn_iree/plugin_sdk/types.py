"""Public enums. Values equal hipDNN's, as written into ``schemas/graph.fbs`` (its generated code).

Names are this project's public ones; where hipDNN's schema spells a member differently the
schema's name is an alias (``hd.DataType.UNSET is hd.DataType.NOT_SET``,
``hd.ReductionMode.MIN_OP is hd.ReductionMode.MIN``).
"""
from __future__ import annotations

import enum

from graph_ir._fbs import graph_generated as _g


class NamedIntEnum(enum.IntEnum):
    """An IntEnum that prints as ``DataType.FLOAT``, not as a bare number (Python 3.11's IntEnum
    ``str()`` is the integer's)."""

    __str__ = enum.Enum.__str__
    __format__ = enum.Enum.__format__


def _from_schema(name: str, schema_cls, doc: str, rename=None) -> type[enum.IntEnum]:
    """``rename`` maps a schema name to the public one; the schema's name stays as an alias."""
    rename = rename or {}
    schema = [(k, v) for k, v in vars(schema_cls).items() if not k.startswith("_") and isinstance(v, int)]
    members = [(rename.get(k, k), v) for k, v in sorted(schema, key=lambda kv: kv[1])]
    members += [(k, v) for k, v in schema if k in rename]   # aliases: same value, listed after
    cls = NamedIntEnum(name, members, module=__name__)
    cls.__doc__ = doc
    return cls


DataType = _from_schema("DataType", _g.DataType, "Tensor element types (hipDNN's names and numbers; "
                        "BOOLEAN = 100 is this project's extension).", {"UNSET": "NOT_SET"})
PointwiseMode = _from_schema("PointwiseMode", _g.PointwiseMode, "Pointwise operations (hipDNN's names and "
                             "numbers; COS, POW, MOD = 100-102 are this project's extensions).",
                             {"UNSET": "NOT_SET"})
ReductionMode = _from_schema("ReductionMode", _g.ReductionMode, "Reduction operations (hipDNN's numbers).",
                             {"MIN_OP": "MIN", "MAX_OP": "MAX"})
NormFwdPhase = _from_schema("NormFwdPhase", _g.NormFwdPhase, "Normalization forward phase.")
ResampleMode = _from_schema("ResampleMode", _g.ResampleMode, "Pooling modes of resample (hipDNN's numbers).")
PaddingMode = _from_schema("PaddingMode", _g.PaddingMode, "Padding of resample (hipDNN's numbers).")
MoeGroupedMatmulMode = _from_schema("MoeGroupedMatmulMode", _g.MoeGroupedMatmulMode,
                                    "Routing of moe_grouped_matmul (hipDNN's numbers): NONE, GATHER, SCATTER.")


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
