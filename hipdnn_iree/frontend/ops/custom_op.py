"""``g.custom_op``: hipDNN's CUSTOM_OP node (mixed into `hd.Graph`).

The node names a registered operation (``hd.register_custom_op``; hipdnn_iree/frontend/custom_ops.py)
and lists its input and output tensors; the outputs keep the dims and data types they are declared
with (graph_ir/ops/custom_op.py). Registration is looked up when an engine is chosen, not here: a
graph may be built, saved as JSON or as hipDNN bytes before its op is registered.
"""
from __future__ import annotations

import numbers

from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType, as_enum
from graph_ir import custom_ops
from graph_ir.desc import OpKind

_SPEC_KEYS = {"dims", "data_type", "stride", "name"}


def _output_spec(spec, i: int, what: str) -> dict:
    """One entry of ``outputs=``: ``(dims, data_type)``, ``(dims,)`` or a dict with ``dims``,
    ``data_type``, ``stride``, ``name`` (every key optional)."""
    if isinstance(spec, dict):
        extra = sorted(str(k) for k in set(spec) - _SPEC_KEYS)
        if extra:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: outputs[{i}] has unknown key(s) {extra}; allowed: "
                                                f"{sorted(_SPEC_KEYS)}")
        out = dict(spec)
    elif isinstance(spec, (tuple, list)) and 1 <= len(spec) <= 2:
        out = {"dims": spec[0], "data_type": spec[1] if len(spec) == 2 else DataType.NOT_SET}
    else:
        raise HipdnnError(Status.BAD_PARAM, f"{what}: outputs[{i}] must be (dims, data_type) or a dict with "
                                            f"'dims' and 'data_type', got {spec!r}")
    out["data_type"] = as_enum(DataType, out.get("data_type", DataType.NOT_SET), f"{what}: outputs[{i}] data_type")
    return out


class CustomOps:
    """Mixed into :class:`hd.Graph`."""

    def custom_op(self, op_id, inputs, outputs, data=b"", name=None):
        """A CUSTOM_OP node: the registered op ``op_id`` (``"<plugin>.<op>"``) on ``inputs``.

        Args:
            op_id: the id given to ``hd.register_custom_op`` (it may be registered later, before
                the build).
            inputs: the op's operands, in the function's argument order (tensors of this graph,
                or Python numbers for scalar constants).
            outputs: one spec per result, in order: ``(dims, data_type)`` or a dict with
                ``dims``, ``data_type`` and optionally ``stride`` and ``name``. The dims are
                required by ``validate()``; a data type left out follows the graph's defaults.
            data: bytes handed to the registration (its callable and its reference).

        Returns:
            The output tensors (a list, even for one output), virtual until ``set_output(True)``.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> x = g.tensor(name="X", uid=1, dim=[4, 8])
            >>> (y,) = g.custom_op("demo.twice", [x], [([4, 8], hd.DataType.FLOAT)])
            >>> y.get_dim()
            [4, 8]
        """
        try:
            custom_ops.check_op_id(op_id)
        except custom_ops.CustomOpError as e:
            raise HipdnnError(Status.BAD_PARAM, f"custom_op: {e}") from None
        what = f"custom_op {op_id!r}"
        if isinstance(inputs, (TensorAttributes, str, bytes)) or not isinstance(inputs, (list, tuple)):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: inputs must be a list of tensors, got {inputs!r}")
        if isinstance(outputs, (str, bytes)) or not isinstance(outputs, (list, tuple)) or not outputs:
            raise HipdnnError(Status.BAD_PARAM, f"{what}: outputs must be a non-empty list of (dims, data_type) "
                                                f"specs, got {outputs!r}")
        for i, x in enumerate(inputs):
            if x is None or isinstance(x, bool) or not isinstance(x, (TensorAttributes, numbers.Real)):
                raise HipdnnError(Status.BAD_PARAM, f"{what}: inputs[{i}] must be a TensorAttributes or a number, "
                                                    f"got {x!r}")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise HipdnnError(Status.BAD_PARAM, f"{what}: data must be bytes, got {type(data).__name__}")
        specs = [_output_spec(s, i, what) for i, s in enumerate(outputs)]
        name = name or f"custom_op_{len(self._nodes)}"
        outs = self._add_node(OpKind.CUSTOM_OP, name, None,
                              {f"input_uids[{i}]": x for i, x in enumerate(inputs)},
                              [f"output_uids[{i}]" for i in range(len(specs))],
                              {"custom_op_id": op_id, "data": bytes(data)})
        for i, (t, s) in enumerate(zip(outs, specs)):
            t.set_name(s.get("name") or f"{name}::out_{i}")
            if s.get("dims") is not None:
                t.set_dim(s["dims"])
            if s.get("stride") is not None:
                t.set_stride(s["stride"])
            t.set_data_type(s["data_type"])
        return outs
