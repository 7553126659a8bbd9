"""Frontend methods for resample (pooling) and resample_backward (mixed into `hd.Graph`).

Validation and shape inference are the OpDefs' (graph_ir/ops/resample_fwd.py, resample_bwd.py,
rules in graph_ir/ops/_resample.py); these methods check the Python arguments and fill hipDNN's fields.
"""
from __future__ import annotations

from hipdnn_iree.frontend.ops.conv import _int_tuple
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType, PaddingMode, ResampleMode
from graph_ir.desc import OpKind


def _mode(op: str, mode) -> ResampleMode:
    try:
        m = ResampleMode(mode)
    except (ValueError, TypeError):
        m = None
    if m is None or m == ResampleMode.NOT_SET or isinstance(mode, bool):
        raise HipdnnError(Status.BAD_PARAM, f"{op}: mode must be hd.ResampleMode.MAXPOOL, AVGPOOL_EXCLUDE_PADDING "
                                            f"or AVGPOOL_INCLUDE_PADDING, got {mode!r}")
    return m


def _params(op: str, ref, mode, window, stride, pre_padding, post_padding) -> dict:
    """hipDNN's fields: stride defaults to the window (torch's default), padding to 0."""
    dims = getattr(ref, "_dim", None)
    rank = len(dims) - 2 if dims is not None and len(dims) > 2 else None
    if window is None:
        raise HipdnnError(Status.BAD_PARAM, f"{op}: window is required (one size per spatial dim)")
    window = _int_tuple(op, "window", window, rank)
    rank = len(window) if rank is None else rank
    out = {"window": window,
           "stride": window if stride is None else _int_tuple(op, "stride", stride, rank)}
    for field, value in (("pre_padding", pre_padding), ("post_padding", post_padding)):
        out[field] = (0,) * len(window) if value is None else _int_tuple(op, field, value, rank)
    out["resample_mode"] = int(mode)
    out["padding_mode"] = int(PaddingMode.NEG_INF_PAD if mode == ResampleMode.MAXPOOL else PaddingMode.ZERO_PAD)
    return out


class ResampleOps:
    """Mixed into :class:`hd.Graph`."""

    def resample(self, x, mode, window, stride=None, pre_padding=None, post_padding=None, generate_index=False,
                 compute_data_type=None, name=None):
        """Pooling over the spatial axes of x ``[N, C, *S]`` (1-3 spatial axes; hipDNN's RESAMPLE_FWD).

        y is ``[N, C, *O]`` with ``O = (S + pre + post - window) // stride + 1`` per spatial axis.
        MAXPOOL: the window's maximum (padding never wins; NaN propagates); AVGPOOL_INCLUDE_PADDING:
        the window's sum / ``prod(window)``; AVGPOOL_EXCLUDE_PADDING: the sum / the number of window
        positions inside x. Padding must be smaller than the window on each side (so every window
        holds an element of x).

        Args:
            x: input tensor.
            mode: an ``hd.ResampleMode``.
            window: window size per spatial dim (list, or one int when x's rank is known).
            stride: per spatial dim; default: the window.
            pre_padding, post_padding: padding before/after each spatial dim; default 0.
            generate_index: MAXPOOL only: also return the index, INT32, dims of y: the flat
                row-major position of the maximum **inside the window** (``0 .. prod(window) - 1``;
                torch's is the flat position in the input plane); ties go to the first maximum.
            compute_data_type: arithmetic type (FLOAT when unset); y is rounded once.
            name: node name.

        Returns:
            y, or ``(y, index)`` with ``generate_index``.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
            >>> x = g.tensor(name="X", dim=[2, 8, 16, 16], stride=[2048, 1, 128, 8])   # NHWC
            >>> y, idx = g.resample(x, hd.ResampleMode.MAXPOOL, [3, 3], [2, 2], [1, 1], [1, 1],
            ...                     generate_index=True)
            >>> _ = y.set_output(True); _ = idx.set_output(True); _ = g.validate()
            >>> y.get_dim(), idx.get_data_type()
            ([2, 8, 8, 8], <DataType.INT32: 4>)
        """
        op = name or "resample"
        mode = _mode(op, mode)
        if not isinstance(generate_index, bool):
            raise HipdnnError(Status.BAD_PARAM, f"{op}: generate_index must be a bool, got {generate_index!r}")
        if generate_index and mode != ResampleMode.MAXPOOL:
            raise HipdnnError(Status.BAD_PARAM, f"{op}: generate_index: only MAXPOOL has an index "
                                                f"(mode is {mode.name})")
        params = _params(op, x, mode, window, stride, pre_padding, post_padding)
        params["generate_index"] = generate_index
        outs = ["y_uid", "index_uid"] if generate_index else ["y_uid"]
        res = self._add_node(OpKind.RESAMPLE_FWD, name, compute_data_type, {"x_uid": x}, outs, params)
        if not generate_index:
            return res[0]
        res[1].set_data_type(DataType.INT32)
        return res[0], res[1]

    def resample_backward(self, dy, mode, window, stride=None, pre_padding=None, post_padding=None, x=None, y=None,
                          index=None, compute_data_type=None, name=None):
        """Gradient of :meth:`resample` with respect to x (hipDNN's RESAMPLE_BWD): dx ``[N, C, *S]``.

        Averages: ``dx[i]`` sums ``dy[o] / divisor(o)`` over the windows o holding i. MAXPOOL:
        ``dy[o]`` goes to its window's argmax, read from ``index`` (the forward's); given ``x``
        instead (y may be given too and is not read), this adds a forward RESAMPLE_FWD node with
        ``generate_index`` whose index the backward reads. dx's dims: x's when x is given, else set
        them (``dx.set_dim([...])``); they must pool to dy's dims.

        Args:
            dy: gradient of y.
            mode, window, stride, pre_padding, post_padding: the forward's.
            x: the forward's input (MAXPOOL without index; gives dx's dims otherwise too).
            y: the forward's output (accepted, not read).
            index: the forward's index (MAXPOOL only).
            compute_data_type: arithmetic type (FLOAT when unset).
            name: node name.

        Returns:
            The virtual output tensor dx.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> dy = g.tensor(name="dY", dim=[2, 4, 5, 5])
            >>> dx = g.resample_backward(dy, hd.ResampleMode.AVGPOOL_INCLUDE_PADDING, [2, 2], [2, 2])
            >>> _ = dx.set_dim([2, 4, 10, 10]).set_output(True); _ = g.validate()
        """
        op = name or "resample_backward"
        mode = _mode(op, mode)
        for what, t in (("x", x), ("y", y), ("index", index)):
            if t is not None:
                self._check_operand(t, what, op)
        if index is not None and mode != ResampleMode.MAXPOOL:
            raise HipdnnError(Status.BAD_PARAM, f"{op}: index: only MAXPOOL reads an index (mode is {mode.name})")
        if mode == ResampleMode.MAXPOOL and index is None and x is None:
            raise HipdnnError(Status.BAD_PARAM, f"{op}: index: MAXPOOL's backward needs the forward's index, "
                                                f"or x to compute it")
        params = _params(op, dy, mode, window, stride, pre_padding, post_padding)
        x_dims = None
        if x is not None:
            try:
                x_dims = self._dims_now(x)
            except HipdnnError:     # NOTE: x's dims depend on a part of the graph not complete yet
                x_dims = None
        if mode == ResampleMode.MAXPOOL and index is None:
            fwd = dict(params, generate_index=True)
            fname = f"{name or 'resample_backward_' + str(len(self._nodes))}::forward"
            _, index = self._add_node(OpKind.RESAMPLE_FWD, fname, compute_data_type, {"x_uid": x},
                                      ["y_uid", "index_uid"], fwd)
            index.set_data_type(DataType.INT32)
        dx = self._add_node(OpKind.RESAMPLE_BWD, name, compute_data_type, {"dy_uid": dy, "index_uid": index},
                            ["dx_uid"], params)[0]
        if x_dims is not None:
            dx.set_dim(x_dims)
        return dx
