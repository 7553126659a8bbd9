"""hipDNN data types as this project treats them (docs/graph_schema.md has the table)."""
from __future__ import annotations

from graph_ir._fbs.graph_generated import DataType as D

DATA_TYPE_NAMES = {v: k for k, v in vars(D).items() if not k.startswith("_") and isinstance(v, int)}

# Element types the lowering and the reference run; the rest (FP8/FP6/FP4/INT4 ...) parse and
# are refused by name.
SUPPORTED_DATA_TYPES = frozenset((D.UNSET, D.FLOAT, D.HALF, D.BFLOAT16, D.DOUBLE, D.UINT8, D.INT32, D.INT8,
                                  D.INT64, D.BOOLEAN))


def data_type_name(v: int) -> str:
    return DATA_TYPE_NAMES.get(v, f"<unknown DataType {v}>")


# data type code -> (MLIR element type, numpy dtype name): the one table of both
ELEMENT_TYPES = {
    D.FLOAT: ("f32", "float32"),
    D.HALF: ("f16", "float16"),
    D.BFLOAT16: ("bf16", "bfloat16"),
    D.DOUBLE: ("f64", "float64"),
    D.INT8: ("i8", "int8"),
    D.UINT8: ("i8", "uint8"),
    D.INT32: ("i32", "int32"),
    D.INT64: ("i64", "int64"),
    D.BOOLEAN: ("i1", "bool"),
}
