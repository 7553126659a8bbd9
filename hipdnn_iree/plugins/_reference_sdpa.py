"""numpy reference for Scaled dot-product attention: sdpa."""
from __future__ import annotations
