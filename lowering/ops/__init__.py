"""Op lowerings; importing this package imports every module in it (each registers its emitters) and
checks that every supported OpDef (graph_ir.opdef.OPS) has one."""
import importlib as _importlib
import pkgutil as _pkgutil

from lowering._registry import check_lowerings

for _m in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    _importlib.import_module(f"{__name__}.{_m}")

check_lowerings()
