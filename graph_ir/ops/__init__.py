"""One module per op kind, each defining and registering its ``OpDef`` (``graph_ir.opdef.OPS``); the
family rules they share (and the MLIR emitters import) are in the ``_``-prefixed modules (``_conv``,
``_norm``); ``_parse_only``: the OpDefs of hipDNN's node types that parse and are refused. Importing
this package imports every module in it (a new op is one new file) and checks the registry
(``graph_ir.opdef.check_registry``)."""
import importlib as _importlib
import pkgutil as _pkgutil

from graph_ir.opdef import check_registry

for _m in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    _importlib.import_module(f"{__name__}.{_m}")

check_registry()
