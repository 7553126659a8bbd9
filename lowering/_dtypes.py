"""hipDNN data types as this project treats them (docs/graph_schema.md has the table)."""
from __future__ import annotations

from lowering._fbs.graph_generated import DataType as D

DATA_TYPE_NAMES = {v: k for k, v in vars(D).items() if not k.startswith("_") and isinstance(v, int)}

# Element types the lowering and the reference run; the rest (FP8/FP6/FP4/INT4 ...) parse and
# are refused by name.
SUPPORTED_DATA_TYPES = frozenset((D.UNSET, D.FLOAT, D.HALF, D.BFLOAT16, D.DOUBLE, D.UINT8, D.INT32, D.INT8,
                                  D.INT64, D.BOOLEAN))


def data_type_name(v: int) -> str:
    return DATA_TYPE_NAMES.get(v, f"<unknown DataType {v}>")
