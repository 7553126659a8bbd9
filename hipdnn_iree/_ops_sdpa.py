"""Frontend methods and shape inference for Scaled dot-product attention: sdpa.

The mixin's methods land on `hd.Graph`; `register_infer` / `register_frontend`
record each op kind's validation/inference and its method name.
"""
from __future__ import annotations


class SdpaOps:
    """Mixed into :class:`hd.Graph`."""
