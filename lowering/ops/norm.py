"""Lowering of Reduction and normalization ops: reduction, batchnorm_inference, layernorm, rmsnorm to linalg."""
from __future__ import annotations
