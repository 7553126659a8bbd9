"""numpy reference for Reduction and normalization ops: reduction, batchnorm_inference, layernorm, rmsnorm."""
from __future__ import annotations
