"""Op lowerings; importing this package registers every one of them."""
from lowering.ops import conv, matmul, norm, pointwise, sdpa  # noqa: F401
