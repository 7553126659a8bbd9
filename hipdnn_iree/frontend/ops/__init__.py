"""Per-op frontend code: each module adds its ``hd.Graph`` methods (a mixin) and registers its
validation/shape inference into ``registry`` (``INFER``, ``FRONTEND_METHODS``). Importing this
package imports every op module, so the registry is complete. To add an op: write its module here
(method + ``@register_infer``), its lowering in ``lowering/ops/`` and its reference in
``plugins/numpy_reference/``; the op-completeness tests check that none of the four is missing.
May import: ``plugin_sdk``, ``lowering``.
"""
from hipdnn_iree.frontend.ops import basic, conv, norm, sdpa  # noqa: F401  (each registers its ops)
