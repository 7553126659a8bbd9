"""hipDNN data types as this project treats them (docs/graph_schema.md has the table)."""
from __future__ import annotations

from graph_ir._fbs.graph_generated import DataType as D

DATA_TYPE_NAMES = {v: k for k, v in vars(D).items() if not k.startswith("_") and isinstance(v, int)}

# Element types the lowering and the reference run; the rest (FP6, INT4, the FNUZ FP8 variants) parse
# and are refused by name.
SUPPORTED_DATA_TYPES = frozenset((D.UNSET, D.FLOAT, D.HALF, D.BFLOAT16, D.DOUBLE, D.UINT8, D.INT32, D.INT8,
                                  D.INT64, D.BOOLEAN, D.FP8_E4M3, D.FP8_E5M2, D.FP8_E8M0, D.FP4_E2M1))

# The 8- and 4-bit float types: codes in bytes at the module boundary (``i8``), decoded to f32
# inside (lowering/_minifloat.py); numpy buffers are ml_dtypes arrays (FP8), packed bytes (FP4).
MINIFLOAT_FORMATS = {D.FP8_E4M3: "e4m3", D.FP8_E5M2: "e5m2", D.FP8_E8M0: "e8m0", D.FP4_E2M1: "e2m1"}

# Types stored several codes per byte: FP4 E2M1 two per byte along the tensor's innermost memory
# axis, element 2i in the low nibble of byte i and 2i+1 in the high one (cuDNN's and torch's
# float4_e2m1fn_x2 order). Such a tensor must be dense with an even innermost memory axis.
CODES_PER_BYTE = {D.FP4_E2M1: 2}


def packed_shape(data_type: int, phys_shape: tuple) -> tuple:
    """The byte shape of a dense tensor whose memory-order shape is ``phys_shape``."""
    n = CODES_PER_BYTE.get(data_type, 1)
    if n == 1 or not phys_shape:
        return tuple(phys_shape)
    return tuple(phys_shape[:-1]) + (phys_shape[-1] // n,)


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
    D.FP8_E4M3: ("i8", "float8_e4m3fn"),
    D.FP8_E5M2: ("i8", "float8_e5m2"),
    D.FP8_E8M0: ("i8", "float8_e8m0fnu"),
    D.FP4_E2M1: ("i8", "float4_e2m1fn"),
}
