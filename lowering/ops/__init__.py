"""Op lowerings; importing this package registers every one of them and checks that every supported
OpDef (graph_ir.opdef.OPS) has one."""
from lowering.ops import conv, matmul, norm, pointwise, sdpa  # noqa: F401
from lowering._registry import check_lowerings

check_lowerings()
