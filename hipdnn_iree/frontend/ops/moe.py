"""Frontend methods for the MoE grouped matmul and its weight gradient (mixed into `hd.Graph`).

Validation and shape inference are the OpDefs' (graph_ir/ops/moe_grouped_matmul.py,
moe_grouped_matmul_bwd.py; rules in graph_ir/ops/_moe.py); these methods check the Python
arguments and the data types of the routing tensors that have one.
"""
from __future__ import annotations

import numbers

from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType, MoeGroupedMatmulMode, as_enum
from graph_ir.desc import OpKind

_INDEX_TYPES = (DataType.INT32, DataType.INT64)


def _check_index_type(op: str, field: str, t) -> None:
    """A routing tensor whose data type is set must be INT32 or INT64 (one left unset gets the graph's
    io type at validate, and the build refuses it then if that is not an integer type)."""
    if isinstance(t, TensorAttributes) and t.get_data_type() not in (DataType.NOT_SET, *_INDEX_TYPES):
        raise HipdnnError(Status.BAD_PARAM, f"{op}: field '{field}' (tensor '{t.get_name()}') has data type "
                                            f"{t.get_data_type().name}: it must be INT32 or INT64")


def _tensor(op: str, field: str, t) -> None:
    if not isinstance(t, TensorAttributes):
        raise HipdnnError(Status.BAD_PARAM, f"{op}: {field} must be a tensor of this graph, got {type(t).__name__}")


class MoeOps:
    """Mixed into :class:`hd.Graph`."""

    def moe_grouped_matmul(self, token, weight, first_token_offset, token_index=None, top_k=0, token_ks=None,
                           mode=None, compute_data_type=None, name=None):
        """Mixture-of-experts grouped matmul (hipDNN's MOE_GROUPED_MATMUL, cuDNN FE's ``moe_grouped_matmul``).

        ``token`` ``[1, M, K]``, ``weight`` ``[E, K, N]``, ``first_token_offset`` ``[G, 1, 1]`` INT32 (or
        INT64), G a multiple of E (``G = batch * E``). The offsets are execute-time data: group ``g``
        owns routed rows ``offset[g] .. offset[g + 1] - 1`` (the last group up to the last routed row)
        and multiplies them by ``weight[g % E]``; the offsets must not decrease (a group may be empty;
        rows before ``offset[0]`` belong to no group). ``mode`` (an ``hd.MoeGroupedMatmulMode``; None
        is NONE) says what a routed row r reads and writes:

        - NONE: token row r, output row r; the output is ``[1, M, N]``.
        - GATHER: token row ``token_index[r]``, output row r; ``token_index`` ``[1, R, 1]`` and the
          output ``[1, R, N]`` (R routed rows).
        - SCATTER: token row r, output row ``token_index[r] * top_k + token_ks[r]``; ``token_index``
          and ``token_ks`` ``[1, M, 1]``, ``1 <= top_k <= E``; the output ``[1, M, N]``.

        Output rows no routed row writes are 0. Routing tensors a mode does not read are ignored;
        ``top_k`` is read by SCATTER only. Accumulates in FLOAT unless a float compute type is set
        and rounds once to the output's type (the graph's io type unless set). The whole op is one
        compiled plan for every routing: the row -> group map is computed in the graph from the
        offsets tensor (no per-expert loop on the host).

        Returns:
            The output tensor.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
            >>> tok = g.tensor(name="token", dim=[1, 64, 32])
            >>> w = g.tensor(name="weight", dim=[4, 32, 16])
            >>> off = g.tensor(name="offsets", dim=[4, 1, 1], data_type=hd.DataType.INT32)
            >>> y = g.moe_grouped_matmul(tok, w, off).set_output(True)
            >>> _ = g.validate(); y.get_dim()
            [1, 64, 16]
        """
        op = name or "moe_grouped_matmul"
        mode = MoeGroupedMatmulMode.NONE if mode is None else as_enum(MoeGroupedMatmulMode, mode, f"{op}: mode")
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or not 0 <= top_k < 2**31:
            raise HipdnnError(Status.BAD_PARAM, f"{op}: top_k must be an int in [0, 2**31), got {top_k!r}")
        for field, t in (("token", token), ("weight", weight), ("first_token_offset", first_token_offset)):
            _tensor(op, field, t)
        _check_index_type(op, "first_token_offset", first_token_offset)
        inputs = {"token_uid": token, "weight_uid": weight, "first_token_offset_uid": first_token_offset}
        for field, t in (("token_index", token_index), ("token_ks", token_ks)):
            if t is not None:
                _tensor(op, field, t)
                _check_index_type(op, field, t)
                inputs[f"{field}_uid"] = t
        return self._add_node(OpKind.MOE_GROUPED_MATMUL, name, compute_data_type, inputs, ["output_uid"],
                              {"mode": int(mode), "top_k": int(top_k)})[0]

    def moe_grouped_matmul_backward(self, doutput, token, first_token_offset, compute_data_type=None, name=None):
        """The weight gradient of :meth:`moe_grouped_matmul` with NONE routing (hipDNN's
        MOE_GROUPED_MATMUL_BWD, cuDNN FE's ``moe_grouped_matmul_bwd``).

        ``doutput`` ``[1, M, N]``, ``token`` ``[1, M, K]``, ``first_token_offset`` ``[G, 1, 1]`` INT32 (or
        INT64), read as the forward reads it: ``dweight[g] = sum over group g's rows r of
        token[r]^T doutput[r]``, a group with no rows gets zeros, rows before ``offset[0]`` add nothing.
        Accumulates in FLOAT unless a float compute type is set.

        Returns:
            ``dweight`` ``[G, K, N]`` (one gradient per group; G = E without batching), row-major.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> dy = g.tensor(name="dY", dim=[1, 64, 16]); tok = g.tensor(name="token", dim=[1, 64, 32])
            >>> off = g.tensor(name="offsets", dim=[4, 1, 1], data_type=hd.DataType.INT32)
            >>> dw = g.moe_grouped_matmul_backward(dy, tok, off).set_output(True)
            >>> _ = g.validate(); dw.get_dim()
            [4, 32, 16]
        """
        op = name or "moe_grouped_matmul_backward"
        for field, t in (("doutput", doutput), ("token", token), ("first_token_offset", first_token_offset)):
            _tensor(op, field, t)
        _check_index_type(op, "first_token_offset", first_token_offset)
        return self._add_node(OpKind.MOE_GROUPED_MATMUL_BWD, name, compute_data_type,
                              {"doutput_uid": doutput, "token_uid": token, "first_token_offset_uid": first_token_offset},
                              ["dweight_uid"])[0]
