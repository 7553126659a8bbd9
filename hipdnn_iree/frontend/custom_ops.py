"""``hd.register_custom_op``, ``hd.unregister_custom_op``, ``hd.registered_custom_ops``: the ops a
CUSTOM_OP node (``g.custom_op``) may name, as the user registers them in this process.

The registry itself is graph_ir/custom_ops.py (the lowering and the numpy reference read it); this
module checks the arguments, reports problems as ``HipdnnError(BAD_PARAM)`` and hands a callable
``mlir`` its tensor types as ``hd.DataType`` members.
"""
from __future__ import annotations

import functools

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType
from graph_ir import custom_ops


def _typed(fn):
    """``fn`` called with ``(dims, hd.DataType)`` pairs (the lowering passes data type codes)."""
    @functools.wraps(fn)
    def call(inputs, outputs, data):
        return fn([(tuple(d), DataType(t)) for d, t in inputs], [(tuple(d), DataType(t)) for d, t in outputs], data)
    return call


def register_custom_op(op_id, mlir, reference=None) -> None:
    """Registers the custom op ``op_id`` (``"<plugin>.<op>"``) for this process; registering an id
    again replaces it.

    Args:
        op_id: the id CUSTOM_OP nodes name (``g.custom_op(op_id, ...)``).
        mlir: MLIR text holding exactly one ``func.func`` (any name) whose arguments are the
            node's inputs and results its outputs, each a ranked tensor of the tensor's logical
            dims and element type (``tensor<4x8xf32>``; f16, bf16, f64, i8 (INT8 and UINT8), i32,
            i64, i1 (BOOLEAN); a scalar constant is ``tensor<f32>``); or a callable
            ``mlir(inputs, outputs, data) -> str`` writing that text, where ``inputs`` and
            ``outputs`` are lists of ``(dims tuple, hd.DataType)`` and ``data`` the node's bytes.
        reference: optional ``reference(inputs, data) -> list of arrays`` (numpy arrays in, one
            array per output out) for the NUMPY_REFERENCE engine.

    Example:
        >>> import hipdnn_iree as hd
        >>> hd.register_custom_op("demo.copy", '''
        ...   func.func @copy(%x: tensor<4xf32>) -> tensor<4xf32> {
        ...     return %x : tensor<4xf32>
        ...   }''', reference=lambda ins, data: [ins[0]])
        >>> "demo.copy" in hd.registered_custom_ops()
        True
        >>> hd.unregister_custom_op("demo.copy")
    """
    try:
        custom_ops.register(op_id, mlir if isinstance(mlir, str) or not callable(mlir) else _typed(mlir), reference)
    except custom_ops.CustomOpError as e:
        raise HipdnnError(Status.BAD_PARAM, f"register_custom_op: {e}") from None


def unregister_custom_op(op_id) -> None:
    """Removes a registration; BAD_PARAM when ``op_id`` is not registered."""
    try:
        custom_ops.unregister(op_id)
    except custom_ops.CustomOpError as e:
        raise HipdnnError(Status.BAD_PARAM, f"unregister_custom_op: {e}") from None


def registered_custom_ops() -> list[str]:
    """The ids registered in this process, sorted."""
    return list(custom_ops.registered())
