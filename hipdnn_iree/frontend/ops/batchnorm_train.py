"""Frontend methods for batchnorm training, batchnorm backward and batchnorm_inference (with the
inverse variance, or with the variance and epsilon) (mixed into `hd.Graph`).

Shape inference and validation are the OpDefs' (graph_ir/ops/batchnorm.py, batchnorm_backward.py,
batchnorm_inference.py, batchnorm_inference_variance_ext.py), shared with the lowering.
"""
from __future__ import annotations

import math
import numbers

from hipdnn_iree.frontend.tensor import TensorAttributes
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType
from graph_ir.desc import OpKind


class _PeerUids:
    """The uids of the peer_stats tensors, read when the node's attributes are made (validate gives
    unnamed tensors their uids first); the attributes class keeps them as a tuple."""

    def __init__(self, tensors):
        self._tensors = tuple(tensors)

    def __iter__(self):
        return iter(t.get_uid() for t in self._tensors)

    def __len__(self):
        return len(self._tensors)


class BatchnormTrainOps:
    """Mixed into :class:`hd.Graph`."""

    def batchnorm(self, x, scale, bias, epsilon=1e-5, momentum=0.1, in_running_mean=None, in_running_var=None,
                  peer_stats=None, compute_data_type=None, name=None):
        """Batchnorm training: statistics per channel (axis 1) over every other axis.

        ``y = (x - mean) * inv_variance * scale + bias`` with the batch's ``mean`` and
        ``inv_variance = 1 / sqrt(var + epsilon)`` (``var`` the biased variance). ``scale`` and
        ``bias`` have dims ``[1, C, 1, ...]``. With ``in_running_mean`` and ``in_running_var``
        (both or neither, dims ``[1, C, 1, ...]``) the node also outputs
        ``(1 - momentum) * old + momentum * batch`` for each, the variance unbiased
        (``var * n / (n - 1)``, ``n`` the element count per channel). ``epsilon`` and ``momentum``
        are scalar constants (a Python float or ``g.tensor(value=...)``). ``peer_stats`` (statistics
        shared across devices) is accepted here and refused NOT_SUPPORTED when the graph is built.

        Returns:
            ``(y, mean, inv_variance, next_running_mean, next_running_var)``: ``y`` has x's dims,
            the statistics ``[1, C, 1, ...]`` and FLOAT whatever the io type; the last two are
            ``None`` without running inputs.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
            >>> x = g.tensor(name="X", uid=1, dim=[4, 8, 5, 5])
            >>> s, b = g.tensor(name="scale", uid=2, dim=[1, 8, 1, 1]), g.tensor(name="bias", uid=3, dim=[1, 8, 1, 1])
            >>> y, mean, inv_var, _, _ = g.batchnorm(x, s, b, epsilon=1e-5)
            >>> mean.get_data_type().name
            'FLOAT'
        """
        name = self._norm_name(OpKind.BATCHNORM, name, epsilon)
        if (in_running_mean is None) != (in_running_var is None):
            miss = "in_running_var" if in_running_var is None else "in_running_mean"
            have = "in_running_mean" if in_running_var is None else "in_running_var"
            raise HipdnnError(Status.BAD_PARAM, f"batchnorm '{name}': {miss} is missing but {have} is set; pass "
                                                "both running statistics or neither")
        running = in_running_mean is not None
        if running:
            _check_momentum(name, momentum)
        peers = _peers(self, peer_stats, name)
        ins = {"x_uid": x, "scale_uid": scale, "bias_uid": bias, "epsilon_uid": epsilon}
        outs = ["y_uid", "mean_uid", "inv_variance_uid"]
        if running:
            ins.update(prev_running_mean_uid=in_running_mean, prev_running_variance_uid=in_running_var,
                       momentum_uid=momentum)
            outs += ["next_running_mean_uid", "next_running_variance_uid"]
        res = self._add_node(OpKind.BATCHNORM, name, compute_data_type, ins, outs,
                             {"peer_stats_uids": _PeerUids(peers)} if peers else None)
        for t in res[1:]:
            t.set_data_type(DataType.FLOAT)
        return tuple(res) + (None, None) * (not running)

    def batchnorm_backward(self, dy, x, scale, mean=None, inv_variance=None, epsilon=None, peer_stats=None,
                           compute_data_type=None, name=None):
        """Gradients of batchnorm training: ``(dx, dscale, dbias)``.

        With ``xhat = (x - mean) * inv_variance`` and ``n`` the element count per channel:
        ``dbias = sum(dy)``, ``dscale = sum(dy * xhat)`` over every axis but 1, and
        ``dx = scale * inv_variance / n * (n * dy - dbias - xhat * dscale)`` (the statistics'
        own gradients included). ``mean`` and ``inv_variance`` are the forward pass's saved
        statistics (``[1, C, 1, ...]``), both or neither; without them they are recomputed from
        ``x`` by a batchnorm node this call adds (hipDNN's backward node has no epsilon), and
        ``epsilon`` is then required.

        Returns:
            ``(dx, dscale, dbias)``: ``dx`` has x's dims, ``dscale`` and ``dbias`` ``[1, C, 1, ...]``,
            FLOAT whatever the io type.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> x, dy = g.tensor(name="X", uid=1, dim=[4, 8, 5, 5]), g.tensor(name="DY", uid=2, dim=[4, 8, 5, 5])
            >>> s = g.tensor(name="scale", uid=3, dim=[1, 8, 1, 1])
            >>> dx, dscale, dbias = g.batchnorm_backward(dy, x, s, epsilon=1e-5)
        """
        name = name or f"batchnorm_backward_{len(self._nodes)}"
        if (mean is None) != (inv_variance is None):
            miss, have = ("inv_variance", "mean") if inv_variance is None else ("mean", "inv_variance")
            raise HipdnnError(Status.BAD_PARAM, f"batchnorm_backward '{name}': {miss} is missing but {have} is set; "
                                                "pass both saved statistics, or neither and epsilon= to recompute them")
        peers = _peers(self, peer_stats, name)
        if mean is None:
            if epsilon is None:
                raise HipdnnError(Status.BAD_PARAM, f"batchnorm_backward '{name}': epsilon is missing: without the "
                                                    "saved mean and inv_variance it is needed to recompute them")
            for f, v in (("dy", dy), ("x", x), ("scale", scale)):
                self._check_operand(v, f, name)
            # NOTE: the statistics node's y is never read (a virtual tensor IREE drops); its bias
            # operand is the scale, any [1, C, 1, ...] tensor would do.
            _, mean, inv_variance, _, _ = self.batchnorm(x, scale, scale, epsilon=epsilon, peer_stats=peer_stats,
                                                         compute_data_type=compute_data_type, name=f"{name}::stats")
        elif epsilon is not None:
            raise HipdnnError(Status.BAD_PARAM, f"batchnorm_backward '{name}': epsilon is set but the saved mean and "
                                                "inv_variance are given (epsilon is only for recomputing them)")
        res = self._add_node(OpKind.BATCHNORM_BACKWARD, name, compute_data_type,
                             {"dy_uid": dy, "x_uid": x, "scale_uid": scale, "mean_uid": mean,
                              "inv_variance_uid": inv_variance}, ["dx_uid", "dscale_uid", "dbias_uid"],
                             {"peer_stats_uids": _PeerUids(peers)} if peers else None)
        for t in res[1:]:
            t.set_data_type(DataType.FLOAT)
        return tuple(res)

    def batchnorm_inference(self, x, mean, inv_variance=None, scale=None, bias=None, variance=None, epsilon=None,
                            compute_data_type=None, name=None) -> TensorAttributes:
        """``y = (x - mean) * inv_variance * scale + bias`` with per-channel statistics.

        ``mean``, ``inv_variance``, ``scale`` and ``bias`` have dims ``[1, C, 1, ...]`` where ``C``
        is axis 1 of ``x``; ``y`` has ``x``'s dims. With ``variance=`` in place of ``inv_variance``
        (exactly one of the two) the node is hipDNN's BATCHNORM_INFERENCE_VARIANCE_EXT,
        ``y = (x - mean) / sqrt(variance + epsilon) * scale + bias``, and ``epsilon`` (a scalar
        constant) is required.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> x = g.tensor(name="X", uid=1, dim=[2, 3, 4, 4])
            >>> m, v, s, b = (g.tensor(name=n, uid=u, dim=[1, 3, 1, 1]) for n, u in
            ...               (("mean", 2), ("inv_var", 3), ("scale", 4), ("bias", 5)))
            >>> g.batchnorm_inference(x, m, v, s, b).set_output(True).get_dim() is None
            True
            >>> y = g.batchnorm_inference(x, m, scale=s, bias=b, variance=v, epsilon=1e-5)
        """
        if variance is None:
            label = name or f"batchnorm_inference_{len(self._nodes)}"
            if inv_variance is None:
                raise HipdnnError(Status.BAD_PARAM, f"batchnorm_inference '{label}': inv_variance is missing: pass "
                                                    "inv_variance, or variance= with epsilon=")
            if epsilon is not None:
                raise HipdnnError(Status.BAD_PARAM, f"batchnorm_inference '{label}': epsilon is set with "
                                                    "inv_variance; epsilon goes with variance= only")
            return self._add_node(OpKind.BATCHNORM_INFERENCE, name, compute_data_type,
                                  {"x_uid": x, "mean_uid": mean, "inv_variance_uid": inv_variance,
                                   "scale_uid": scale, "bias_uid": bias}, ["y_uid"])[0]
        label = name or f"batchnorm_inference_variance_ext_{len(self._nodes)}"
        if inv_variance is not None:
            raise HipdnnError(Status.BAD_PARAM, f"batchnorm_inference '{label}': inv_variance and variance are both "
                                                "set; pass exactly one")
        if epsilon is None:
            raise HipdnnError(Status.BAD_PARAM, f"batchnorm_inference '{label}': epsilon is missing: variance= needs "
                                                "epsilon= (y = (x - mean) / sqrt(variance + epsilon) * scale + bias)")
        name = self._norm_name(OpKind.BATCHNORM_INFERENCE_VARIANCE_EXT, name, epsilon)
        return self._add_node(OpKind.BATCHNORM_INFERENCE_VARIANCE_EXT, name, compute_data_type,
                              {"x_uid": x, "mean_uid": mean, "variance_uid": variance, "scale_uid": scale,
                               "bias_uid": bias, "epsilon_uid": epsilon}, ["y_uid"])[0]


def _check_momentum(name: str, momentum) -> None:
    value = momentum.get_value() if isinstance(momentum, TensorAttributes) else momentum
    if momentum is None:
        raise HipdnnError(Status.BAD_PARAM, f"batchnorm '{name}': momentum is missing: the running statistics need "
                                            "it (e.g. 0.1)")
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isfinite(float(value)):
        raise HipdnnError(Status.BAD_PARAM, f"batchnorm '{name}': momentum value {value!r} must be a finite number "
                                            "(e.g. 0.1)")


def _peers(graph, peer_stats, name: str) -> tuple:
    if peer_stats is None:
        return ()
    peers = tuple(peer_stats) if isinstance(peer_stats, (list, tuple)) else (peer_stats,)
    for t in peers:
        if not isinstance(t, TensorAttributes):
            raise HipdnnError(Status.BAD_PARAM, f"{name}: peer_stats must be TensorAttributes, got {type(t).__name__}")
        graph._check_operand(t, "peer_stats", name)
    return peers
