"""A graph node as the frontend holds it, before validate() turns it into a ``NodeDesc``."""
from __future__ import annotations

from hipdnn_iree.plugin_sdk.types import DataType, as_enum


class _Node:
    def __init__(self, kind, name, compute_data_type, tensors: dict, params: dict):
        self.kind, self.name = kind, name
        self.compute_data_type = (DataType.NOT_SET if compute_data_type is None else
                                  as_enum(DataType, compute_data_type, f"{kind.name.lower()} '{name}': compute_data_type"))
        self.tensors = tensors    # attrs field -> TensorAttributes (or None when absent)
        self.params = params
