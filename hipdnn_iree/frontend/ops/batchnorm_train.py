"""Frontend methods for batchnorm training, batchnorm backward, batchnorm_inference with a variance (mixed into `hd.Graph`)."""
from __future__ import annotations


class BatchnormTrainOps:
    """Mixed into :class:`hd.Graph`."""
