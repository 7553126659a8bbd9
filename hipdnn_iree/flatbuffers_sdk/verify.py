"""Bounds checks for FlatBuffer tables read with the Python runtime.

The implementation lives in :mod:`graph_ir.fbverify` (the bottom layer, so the graph codec in
``graph_ir/desc.py`` can use it too); this module is its name for the SDK layers.
"""
from graph_ir.fbverify import SCALAR, VECTOR, FlatBufferError, check_table, slot_vector, table_vector  # noqa: F401
