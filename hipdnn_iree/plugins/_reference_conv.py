"""numpy reference for Convolution ops: conv_fprop, conv_dgrad, conv_wgrad."""
from __future__ import annotations
