"""Numeric tolerances per output data type, in one place: (rtol, atol).

The reference computes in float64 and rounds once to the output type; the IREE
engine computes in the compute type (float32 unless set) and rounds once. So
the budget is about one or two ulps of the output type plus float32
accumulation error.
"""
import hipdnn_iree as hd

TOLERANCES = {
    hd.DataType.DOUBLE: (1e-10, 1e-10),
    hd.DataType.FLOAT: (1e-4, 1e-4),
    hd.DataType.HALF: (1e-2, 1e-2),
    hd.DataType.BFLOAT16: (4e-2, 4e-2),
}


def tolerance(data_type) -> tuple[float, float]:
    return TOLERANCES.get(hd.DataType(data_type), (0.0, 0.0))
