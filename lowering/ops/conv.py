"""Lowering of Convolution ops: conv_fprop, conv_dgrad, conv_wgrad to linalg."""
from __future__ import annotations
