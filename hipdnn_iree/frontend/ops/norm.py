"""Frontend methods and shape inference for reduction and normalization ops:
reduction, layernorm, rmsnorm (batchnorm_inference is in batchnorm_train.py).

The mixin's methods land on `hd.Graph`; each op's validation and shape
inference is its OpDef's (graph_ir/ops/reduction.py, batchnorm_inference.py,
layernorm.py, rmsnorm.py), which the lowering shares, so that validation and
lowering report the same message.
"""
from __future__ import annotations

import numbers

from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.plugin_sdk.types import NormFwdPhase, ReductionMode, as_enum
from hipdnn_iree.plugin_sdk.errors import to_hipdnn
from graph_ir.desc import GraphError, OpKind
from graph_ir.ops._norm import check_epsilon


class NormOps:
    """Mixed into :class:`hd.Graph`."""

    def reduction(self, x, mode=None, compute_data_type=None, name=None) -> TensorAttributes:
        """Reduces ``x`` over the axes where the output has size 1.

        The caller sets the output's dims: same rank as ``x``, 1 on every reduced
        axis and ``x``'s size elsewhere. Modes: ADD, MUL, MIN, MAX, AMAX (max of
        ``|x|``), AVG, NORM1 (sum of ``|x|``), NORM2 (square root of the sum of
        squares) and MUL_NO_ZEROS (product of the non-zero elements; a slice of
        zeros only gives 1, the empty product). Accumulates in the compute type
        (FLOAT unless set) and rounds once to the output type.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> x = g.tensor(name="X", uid=1, dim=[8, 16, 4])
            >>> y = g.reduction(x, mode=hd.ReductionMode.AVG).set_dim([8, 1, 1]).set_output(True)
            >>> g.validate() is g
            True
        """
        mode = _enum(ReductionMode, mode, "reduction", "mode")
        return self._add_node(OpKind.REDUCTION, name, compute_data_type, {"x_uid": x}, ["y_uid"],
                              {"mode": int(mode)})[0]

    def layernorm(self, x, scale, bias, epsilon=1e-5, forward_phase=NormFwdPhase.INFERENCE,
                  compute_data_type=None, name=None):
        """Layer normalization over the axes the scale spans, as hipDNN reads them.

        ``y = (x - mean) * inv_variance * scale + bias`` where ``mean`` and the
        biased variance ``var`` are taken over the normalized axes and
        ``inv_variance = 1 / sqrt(var + epsilon)``. The normalized axes are the
        trailing axes where ``scale`` has x's extents (``scale`` is 1 before
        them; a lower-rank scale is right-aligned, as numpy broadcasts):
        ``[1, *x.dims[1:]]`` normalizes every axis after the batch axis,
        ``[1, 1, E]`` (or ``[E]``) on x ``[B, S, E]`` each token. ``bias`` has
        the scale's dims. A scale of all 1s names no axis and is refused.

        Returns:
            ``(y, mean, inv_variance)``; in the TRAINING phase ``mean`` and
            ``inv_variance`` are outputs of x's dims with 1 on the normalized
            axes (``[N, 1, 1, ...]`` for the full scale), in INFERENCE they are
            ``None``.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> x = g.tensor(name="X", uid=1, dim=[4, 64])
            >>> s, b = g.tensor(name="scale", uid=2, dim=[1, 64]), g.tensor(name="bias", uid=3, dim=[1, 64])
            >>> y, mean, inv_var = g.layernorm(x, s, b, epsilon=1e-5,
            ...                                forward_phase=hd.NormFwdPhase.TRAINING)
            >>> [t.set_output(True) is t for t in (y, mean, inv_var)]
            [True, True, True]
        """
        phase = _enum(NormFwdPhase, forward_phase, "layernorm", "forward_phase")
        name = self._norm_name(OpKind.LAYERNORM, name, epsilon)
        outs = ["y_uid"] + (["mean_uid", "inv_variance_uid"] if phase == NormFwdPhase.TRAINING else [])
        res = self._add_node(OpKind.LAYERNORM, name, compute_data_type,
                             {"x_uid": x, "scale_uid": scale, "bias_uid": bias, "epsilon_uid": epsilon},
                             outs, {"phase": int(phase)})
        return (res[0], res[1], res[2]) if len(res) == 3 else (res[0], None, None)

    def _norm_name(self, kind: OpKind, name, epsilon) -> str:
        """The node's name; checks a known epsilon value now.

        NOTE: shape inference sees dims only, not scalar values, so a negative
        epsilon is reported here, at the call that passes it (and again by the
        lowering for graphs that come from bytes).
        """
        name = name or f"{kind.name.lower()}_{len(self._nodes)}"
        value = epsilon.get_value() if isinstance(epsilon, TensorAttributes) else epsilon
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            try:
                check_epsilon(float(value))
            except GraphError as e:
                raise to_hipdnn(e, "graph", f"{kind.name.lower()} '{name}': ") from None
        return name


def _enum(cls, value, op: str, field: str):
    return as_enum(cls, value, f"{op}: {field}")

