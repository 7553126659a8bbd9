"""Lowering of Scaled dot-product attention: sdpa to linalg."""
from __future__ import annotations
