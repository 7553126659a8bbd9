"""Frontend methods for rmsnorm (training and bias), layernorm_backward, rmsnorm_backward (mixed into `hd.Graph`)."""
from __future__ import annotations


class NormBackwardOps:
    """Mixed into :class:`hd.Graph`."""
