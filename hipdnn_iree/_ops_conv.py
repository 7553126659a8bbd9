"""Frontend methods and shape inference for Convolution ops: conv_fprop, conv_dgrad, conv_wgrad.

The mixin's methods land on `hd.Graph`; `register_infer` / `register_frontend`
record each op kind's validation/inference and its method name.
"""
from __future__ import annotations


class ConvOps:
    """Mixed into :class:`hd.Graph`."""
