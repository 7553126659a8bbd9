"""Frontend methods for scaled dot-product attention: sdpa and sdpa_backward.

The mixin's methods land on `hd.Graph`; the op's validation and shape inference is its OpDef's
(graph_ir/ops/sdpa.py, graph_ir/ops/sdpa_backward.py).
"""
from __future__ import annotations

import math
import numbers

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.plugin_sdk.types import DataType
from graph_ir.desc import OpKind

_FLOAT_COMPUTE = (DataType.NOT_SET, DataType.FLOAT, DataType.HALF, DataType.BFLOAT16, DataType.DOUBLE)


class SdpaOps:
    """Mixed into :class:`hd.Graph`."""

    def sdpa(self, q, k, v, attn_scale=None, is_causal=False, mask=None, generate_stats=False,
             compute_data_type=None, name=None):
        """Scaled dot-product attention: ``o = softmax(q k^T * attn_scale + mask) v``.

        Logical dims (cuDNN/hipDNN order; other memory layouts such as BSHD go in the strides):
        q ``[B, Hq, Sq, D]``, k ``[B, Hk, Skv, D]``, v ``[B, Hv, Skv, Dv]`` -> o ``[B, Hq, Sq, Dv]``.
        With ``Hk < Hq`` (``Hq % Hk == 0``) this is grouped-query attention: query head ``h``
        attends with kv head ``h // (Hq / Hk)``; v's head count may differ from k's (as in
        cuDNN), query head ``h`` then reads v head ``h // (Hq / Hv)``.

        Args:
            q, k, v: query, key and value tensors.
            attn_scale: positive factor applied to ``q k^T``; ``None`` means ``1 / sqrt(D)``. A
                number is written as hipDNN's ``attn_scale_value``; a one-element tensor as its
                ``scale_tensor_uid``: a constant (``g.tensor(value=0.125)``) is baked into the plan,
                a tensor of dims ``[1]`` bound in the variant pack is read at every execute.
            is_causal: query ``i`` attends only to keys ``j <= i``. The mask is aligned to the
                top-left corner (as PyTorch's ``is_causal``), also when ``Sq != Skv``: with
                ``Sq > Skv`` the last queries see every key; with ``Sq < Skv`` the trailing keys
                are seen by no query.
            mask: optional tensor broadcastable (right-aligned) to ``[B, Hq, Sq, Skv]``. A BOOLEAN
                mask keeps the scores where it is true (PyTorch's boolean ``attn_mask``); a float
                mask is added to the scaled scores. A query whose keys are all masked gets 0.
            generate_stats: also return the statistics sdpa_backward takes: ``stats``, FLOAT
                ``[B, Hq, Sq, 1]`` (unless its data type is set), the natural log of the sum over
                the keys of ``exp`` of the scaled, masked scores (log-sum-exp; -inf for a query
                whose keys are all masked). The plan then computes o by the composition, not the
                fused attention op (which has no statistics).
            compute_data_type: accumulation type (FLOAT when unset); the result is rounded once
                to o's type. On GPU targets the fused attention op additionally rounds the scaled
                q and the softmax weights to the input type before its f32 products.
            name: node name.

        Returns:
            The virtual output tensor o; with ``generate_stats``, ``(o, stats)``.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
            >>> q = g.tensor(name="Q", dim=[1, 4, 16, 64])
            >>> kv = [g.tensor(name=n, dim=[1, 2, 32, 64]) for n in "KV"]
            >>> o = g.sdpa(q, *kv, is_causal=True).set_output(True)
            >>> _ = g.validate()
            >>> o.get_dim()
            [1, 4, 16, 64]
        """
        if not isinstance(generate_stats, bool):
            raise HipdnnError(Status.BAD_PARAM, f"sdpa: generate_stats must be a bool, got {generate_stats!r}")
        scale_tensor, params = self._sdpa_params("sdpa", attn_scale, is_causal, mask)
        outs = ["o_uid"]
        if generate_stats:
            params["generate_stats"] = True
            outs.append("stats_uid")
        res = self._add_node(OpKind.SDPA, name, compute_data_type,
                             {"q_uid": q, "k_uid": k, "v_uid": v, "mask_uid": mask, "scale_uid": scale_tensor},
                             outs, params)
        if not generate_stats:
            return res[0]
        res[1].set_data_type(DataType.FLOAT)   # NOTE: FLOAT statistics whatever the io type
        return res[0], res[1]

    def sdpa_backward(self, q, k, v, o, do, stats, attn_scale=None, is_causal=False, mask=None,
                      compute_data_type=None, name=None):
        """Gradients of :meth:`sdpa` with respect to q, k and v.

        With ``S = attn_scale * q k^T`` (plus the mask and the causal mask, as sdpa) and the
        forward's ``stats``: ``P = exp(S - stats)`` (0 where masked, and for a query whose keys
        are all masked: stats -inf), ``dV = P^T dO``, ``dP = dO V^T``, ``D = rowsum(dO * O)``,
        ``dS = P * (dP - D)``, ``dQ = attn_scale * dS K``, ``dK = attn_scale * dS^T Q``. With
        grouped-query attention dK and dV are summed over the query heads sharing a kv head.

        Args:
            q, k, v: the forward's inputs (dims as :meth:`sdpa`).
            o: the forward's output ``[B, Hq, Sq, Dv]``; do: its gradient, o's dims.
            stats: the forward's statistics ``[B, Hq, Sq, 1]`` (``sdpa(..., generate_stats=True)``).
            attn_scale, is_causal, mask: as given to the forward.
            compute_data_type: accumulation type (FLOAT when unset); each gradient is rounded once
                to its type.
            name: node name.

        Returns:
            ``(dq, dk, dv)``, virtual tensors of q's, k's and v's dims (and stride order, unless set).

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
            >>> q, k, v = (g.tensor(name=n, dim=[1, 2, 16, 64]) for n in "QKV")
            >>> o, stats = g.sdpa(q, k, v, is_causal=True, generate_stats=True)
            >>> do = g.tensor(name="dO", dim=[1, 2, 16, 64])
            >>> grads = g.sdpa_backward(q, k, v, o, do, stats, is_causal=True)
            >>> [t.set_output(True) is t for t in grads]
            [True, True, True]
            >>> _ = g.validate()
            >>> stats.get_data_type(), grads[1].get_dim()
            (<DataType.FLOAT: 1>, [1, 2, 16, 64])
        """
        scale_tensor, params = self._sdpa_params("sdpa_backward", attn_scale, is_causal, mask)
        res = self._add_node(OpKind.SDPA_BACKWARD, name, compute_data_type,
                             {"q_uid": q, "k_uid": k, "v_uid": v, "o_uid": o, "do_uid": do, "stats_uid": stats,
                              "mask_uid": mask, "scale_uid": scale_tensor},
                             ["dq_uid", "dk_uid", "dv_uid"], params)
        return res[0], res[1], res[2]

    @staticmethod
    def _sdpa_params(op: str, attn_scale, is_causal, mask):
        """Checks the scale, causal flag and mask of sdpa / sdpa_backward; returns the scale tensor
        (or None) and the node's parameters."""
        scale_tensor = attn_scale if isinstance(attn_scale, TensorAttributes) else None
        if scale_tensor is not None:
            value = scale_tensor.get_value() if scale_tensor.is_scalar() else None
            if value is not None and not (math.isfinite(value) and value > 0):
                raise HipdnnError(Status.BAD_PARAM, f"{op}: attn_scale tensor '{scale_tensor.get_name()}' has value "
                                                    f"{value}; it must be a positive finite number")
            attn_scale = None
        elif attn_scale is not None and (isinstance(attn_scale, bool) or not isinstance(attn_scale, numbers.Real)
                                         or math.isnan(attn_scale)):
            raise HipdnnError(Status.BAD_PARAM, f"{op}: attn_scale must be a positive number, a one-element tensor "
                                                f"or None (meaning 1/sqrt(head_dim)), got {attn_scale!r}")
        if not isinstance(is_causal, bool):
            raise HipdnnError(Status.BAD_PARAM, f"{op}: is_causal must be a bool, got {is_causal!r}")
        mask_type = getattr(mask, "_data_type", DataType.NOT_SET)
        if mask_type not in _FLOAT_COMPUTE + (DataType.BOOLEAN,):
            raise HipdnnError(Status.BAD_PARAM, f"{op}: mask '{mask.get_name()}' has data type {mask_type.name}; "
                                                f"use BOOLEAN (true = keep) or a float type (added to the scores)")
        params = {"attn_scale": math.nan if attn_scale is None else float(attn_scale), "is_causal": is_causal}
        return scale_tensor, params

