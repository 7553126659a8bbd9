"""Frontend methods for rmsnorm (inference and training, with an optional bias), layernorm_backward
and rmsnorm_backward (mixed into `hd.Graph`).

Validation and shape inference are the OpDefs' (graph_ir/ops/rmsnorm.py, layernorm_backward.py,
rmsnorm_backward.py; rules in graph_ir/ops/_norm.py), shared with the lowering.
"""
from __future__ import annotations

from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType, NormFwdPhase, as_enum
from graph_ir.desc import OpKind


def _like_scale(scale, *outs) -> None:
    """Parameter gradients take the scale's data type when it has one (the caller may set another);
    otherwise the graph's defaults apply (io_data_type, as for the scale itself)."""
    dt = scale.get_data_type() if isinstance(scale, TensorAttributes) else DataType.NOT_SET
    if dt != DataType.NOT_SET:
        for t in outs:
            t.set_data_type(dt)


class NormBackwardOps:
    """Mixed into :class:`hd.Graph`."""

    def rmsnorm(self, x, scale, epsilon=1e-5, forward_phase=NormFwdPhase.INFERENCE, bias=None,
                compute_data_type=None, name=None):
        """RMS normalization: ``y = x * inv_rms * scale (+ bias)``, ``inv_rms = 1 / sqrt(mean(x^2) + epsilon)``.

        The mean is taken over the axes the scale spans, as in :meth:`layernorm`:
        ``[1, *x.dims[1:]]`` for every axis after the batch axis, ``[1, 1, E]`` or ``[E]``
        for the last axis of ``[B, S, E]``. ``bias`` (optional) has the scale's dims.

        Returns:
            ``y`` in the INFERENCE phase; ``(y, inv_rms)`` in TRAINING, ``inv_rms`` FLOAT
            (unless set otherwise) with x's dims and 1 on the normalized axes.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.HALF)
            >>> x = g.tensor(name="X", uid=1, dim=[4, 64])
            >>> s = g.tensor(name="scale", uid=2, dim=[1, 64])
            >>> y, inv_rms = g.rmsnorm(x, s, epsilon=1e-6, forward_phase=hd.NormFwdPhase.TRAINING)
            >>> inv_rms.get_data_type()
            <DataType.FLOAT: 1>
        """
        phase = as_enum(NormFwdPhase, forward_phase, "rmsnorm: forward_phase")
        name = self._norm_name(OpKind.RMSNORM, name, epsilon)
        training = phase == NormFwdPhase.TRAINING
        inputs = {"x_uid": x, "scale_uid": scale, "epsilon_uid": epsilon}
        if bias is not None:
            inputs["bias_uid"] = bias
        res = self._add_node(OpKind.RMSNORM, name, compute_data_type, inputs,
                             ["y_uid"] + (["inv_rms_uid"] if training else []), {"phase": int(phase)})
        if not training:
            return res[0]
        res[1].set_data_type(DataType.FLOAT)
        return res[0], res[1]

    def layernorm_backward(self, dy, x, scale, mean, inv_variance, epsilon=None, compute_data_type=None,
                           name=None):
        """Gradients of :meth:`layernorm` with respect to x, the scale and the bias.

        ``mean`` and ``inv_variance`` are the forward's TRAINING outputs (x's dims with 1 on the
        normalized axes, which the scale names as in the forward); pass both as None with
        ``epsilon`` to recompute them from x. Per row, with ``xhat = (x - mean) * inv_variance``
        and ``g = dy * scale``: ``dx = inv_variance * (g - mean(g) - xhat * mean(g * xhat))``;
        ``dscale = sum(dy * xhat)`` and ``dbias = sum(dy)`` over the axes the scale broadcasts on.
        Computes in FLOAT unless a float compute type is set.

        Returns:
            ``(dx, dscale, dbias)``: dx has x's dims (and stride order), dscale and dbias the
            scale's dims and data type.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> x, dy = g.tensor(name="X", uid=1, dim=[4, 64]), g.tensor(name="dY", uid=2, dim=[4, 64])
            >>> s = g.tensor(name="scale", uid=3, dim=[1, 64])
            >>> m, v = g.tensor(name="mean", uid=4, dim=[4, 1]), g.tensor(name="inv_var", uid=5, dim=[4, 1])
            >>> dx, dscale, dbias = g.layernorm_backward(dy, x, s, m, v)
            >>> [t.set_output(True) is t for t in (dx, dscale, dbias)]
            [True, True, True]
        """
        name = self._norm_name(OpKind.LAYERNORM_BACKWARD, name, epsilon)
        inputs = {"dy_uid": dy, "x_uid": x, "scale_uid": scale, "mean_uid": mean, "inv_variance_uid": inv_variance}
        if epsilon is not None:
            inputs["epsilon_uid"] = epsilon
        dx, dscale, dbias = self._add_node(OpKind.LAYERNORM_BACKWARD, name, compute_data_type, inputs,
                                           ["dx_uid", "dscale_uid", "dbias_uid"])
        _like_scale(scale, dscale, dbias)
        return dx, dscale, dbias

    def rmsnorm_backward(self, dy, x, scale, inv_rms, has_dbias=False, compute_data_type=None, name=None):
        """Gradients of :meth:`rmsnorm` with respect to x, the scale and (``has_dbias``) the bias.

        ``inv_rms`` is the forward's TRAINING output. Per row, with ``xhat = x * inv_rms`` and
        ``g = dy * scale``: ``dx = inv_rms * (g - xhat * mean(g * xhat))``; ``dscale = sum(dy * xhat)``
        and ``dbias = sum(dy)`` over the axes the scale broadcasts on.

        Returns:
            ``(dx, dscale, dbias)``, ``dbias`` None unless ``has_dbias``; dscale and dbias have
            the scale's dims and data type.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> x, dy = g.tensor(name="X", uid=1, dim=[2, 3, 8]), g.tensor(name="dY", uid=2, dim=[2, 3, 8])
            >>> s, r = g.tensor(name="scale", uid=3, dim=[1, 1, 8]), g.tensor(name="inv_rms", uid=4, dim=[2, 3, 1])
            >>> dx, dscale, dbias = g.rmsnorm_backward(dy, x, s, r)
            >>> dbias is None
            True
        """
        if not isinstance(has_dbias, bool):
            raise HipdnnError(Status.BAD_PARAM, f"rmsnorm_backward: has_dbias must be True or False, got {has_dbias!r}")
        name = name or f"rmsnorm_backward_{len(self._nodes)}"
        outs = ["dx_uid", "dscale_uid"] + (["dbias_uid"] if has_dbias else [])
        res = self._add_node(OpKind.RMSNORM_BACKWARD, name, compute_data_type,
                             {"dy_uid": dy, "x_uid": x, "scale_uid": scale, "inv_rms_uid": inv_rms}, outs)
        _like_scale(scale, *res[1:])
        return res[0], res[1], (res[2] if has_dbias else None)
