"""Op lowerings; importing this package registers every one of them."""
from lowering.ops import matmul, pointwise  # noqa: F401
