"""Frontend methods for resample (pooling) and resample_backward (mixed into `hd.Graph`)."""
from __future__ import annotations


class ResampleOps:
    """Mixed into :class:`hd.Graph`."""
