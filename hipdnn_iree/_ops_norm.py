"""Frontend methods and shape inference for Reduction and normalization ops: reduction, batchnorm_inference, layernorm, rmsnorm.

The mixin's methods land on `hd.Graph`; `register_infer` / `register_frontend`
record each op kind's validation/inference and its method name.
"""
from __future__ import annotations


class NormOps:
    """Mixed into :class:`hd.Graph`."""
