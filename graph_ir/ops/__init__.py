"""One module per op kind this project lowers, each defining and registering its ``OpDef``
(``graph_ir.opdef.OPS``): matmul, pointwise, reduction, batchnorm_inference, layernorm, rmsnorm, sdpa,
conv_fprop, conv_dgrad, conv_wgrad; the family rules they share (and the MLIR emitters import) are in
``_conv`` and ``_norm`` (and matmul, pointwise, sdpa, which are one op each); ``_parse_only``: the
OpDefs of hipDNN's node types that parse and are refused. Importing this package registers them all
and checks the registry (``graph_ir.opdef.check_registry``)."""
from graph_ir.ops import (_parse_only, batchnorm_inference, conv_dgrad, conv_fprop, conv_wgrad,  # noqa: F401
                          layernorm, matmul, pointwise, reduction, rmsnorm, sdpa)
from graph_ir.opdef import check_registry

check_registry()
