"""Bounds checks for FlatBuffer tables read with the Python runtime.

The implementation lives in :mod:`lowering._fbverify` (the bottom layer, so the graph codec in
``lowering/graph_ir.py`` can use it too); this module is its name for the SDK layers.
"""
from lowering._fbverify import SCALAR, VECTOR, FlatBufferError, check_table, slot_vector, table_vector  # noqa: F401
