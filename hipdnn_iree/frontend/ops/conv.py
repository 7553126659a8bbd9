"""Frontend methods and shape inference for Convolution ops: conv_fprop, conv_dgrad, conv_wgrad.

The mixin's methods land on `hd.Graph`; each op's validation and shape inference is its OpDef's
(graph_ir/ops/conv_fprop.py, conv_dgrad.py, conv_wgrad.py).
"""
from __future__ import annotations

import numbers

from hipdnn_iree.frontend.tensor import INT64_MAX, INT64_MIN
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from graph_ir.desc import OpKind


def _int_tuple(op: str, field: str, value, rank: int | None) -> tuple[int, ...]:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if rank is None:
            raise HipdnnError(Status.BAD_PARAM, f"{op}: {field}={value!r}: give one value per spatial dim as a "
                                                f"list (the operand's dims are not known yet)")
        items = [value] * rank
    else:
        try:
            items = list(value)
        except TypeError:
            items = None
    if items is None or any(isinstance(e, bool) or not isinstance(e, numbers.Integral) for e in items):
        raise HipdnnError(Status.BAD_PARAM, f"{op}: {field} must be a list of ints (one per spatial dim), "
                                            f"got {value!r}")
    out = tuple(int(e) for e in items)
    big = [e for e in out if not INT64_MIN <= e <= INT64_MAX]
    if big:   # NOTE: int64 in hipDNN's graph FlatBuffer; the range of each value is checked at validate()
        raise HipdnnError(Status.BAD_PARAM, f"{op}: {field} {list(out)}: {big[0]} is out of the int64 range "
                                            f"(-2**63 .. 2**63 - 1)")
    return out


def _conv_params(op: str, ref, padding, pre_padding, post_padding, stride, dilation) -> dict:
    """Attribute fields of a conv node; ``ref`` is the operand whose rank fixes the spatial rank.

    Unset attributes become their defaults when the spatial rank is already known and
    stay empty (meaning the defaults) otherwise; validate() checks the values.
    """
    if padding is not None and (pre_padding is not None or post_padding is not None):
        raise HipdnnError(Status.BAD_PARAM, f"{op}: padding={padding!r} was given together with "
                                            f"pre_padding={pre_padding!r} / post_padding={post_padding!r}; give "
                                            f"either symmetric padding or pre_padding/post_padding, not both")
    dims = getattr(ref, "_dim", None)
    rank = len(dims) - 2 if dims is not None and len(dims) > 2 else None
    if padding is not None:
        pre_padding = post_padding = _int_tuple(op, "padding", padding, rank)
    out = {}
    for field, value, default in (("pre_padding", pre_padding, 0), ("post_padding", post_padding, 0),
                                  ("stride", stride, 1), ("dilation", dilation, 1)):
        if value is None:
            out[field] = (default,) * rank if rank is not None else ()
        else:
            out[field] = _int_tuple(op, field, value, rank)
    return out


class ConvOps:
    """Mixed into :class:`hd.Graph`."""

    def conv_fprop(self, x, w, padding=None, pre_padding=None, post_padding=None, stride=None, dilation=None,
                   compute_data_type=None, name=None):
        """Forward convolution (cross-correlation, as cuDNN and PyTorch).

        Logical dims are channels-first; channels-last layouts (NHWC, NDHWC, NWC) go in the
        strides. x ``[N, C, *S]`` and w ``[K, C/G, *R]`` give y ``[N, K, *O]`` with
        ``G = C / w.dims[1]`` groups (``G == C`` is depthwise) and
        ``O = (S + pre + post - dilation * (R - 1) - 1) // stride + 1``. 1-D, 2-D and 3-D.

        Args:
            x: input tensor.
            w: filter tensor.
            padding: symmetric zero padding per spatial dim (list of ints, or one int).
            pre_padding, post_padding: asymmetric padding before/after each spatial dim
                (not together with ``padding``).
            stride, dilation: per spatial dim; default all ones.
            compute_data_type: accumulation type (FLOAT when unset); y is rounded once.
            name: node name.

        Returns:
            The virtual output tensor y (dims inferred at validate()).

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
            >>> x = g.tensor(name="X", dim=[2, 8, 16, 16], stride=[2048, 1, 128, 8])   # NHWC
            >>> w = g.tensor(name="W", dim=[32, 8, 3, 3], stride=[72, 1, 24, 8])
            >>> y = g.conv_fprop(x, w, padding=[1, 1], stride=[2, 2]).set_output(True)
            >>> _ = g.validate()
            >>> y.get_dim()
            [2, 32, 8, 8]
        """
        op = name or "conv_fprop"
        params = _conv_params(op, x, padding, pre_padding, post_padding, stride, dilation)
        return self._add_node(OpKind.CONV_FPROP, name, compute_data_type, {"x_uid": x, "w_uid": w},
                              ["y_uid"], params)[0]

    def conv_dgrad(self, dy, w, padding=None, pre_padding=None, post_padding=None, stride=None, dilation=None,
                   compute_data_type=None, name=None):
        """Gradient of :meth:`conv_fprop` with respect to its input x.

        dy ``[N, K, *O]`` and w ``[K, C/G, *R]`` give dx ``[N, C, *S]``. The attributes are
        the forward convolution's. dx's dims cannot be inferred (groups and, with stride > 1,
        the spatial size are ambiguous): set them with ``dx.set_dim([...])``.

        Args:
            dy: gradient of the forward output.
            w: the forward filter.
            padding, pre_padding, post_padding, stride, dilation: as for conv_fprop.
            compute_data_type: accumulation type (FLOAT when unset).
            name: node name.

        Returns:
            The virtual output tensor dx (set its dims).

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> dy = g.tensor(name="dY", dim=[2, 6, 5, 5])
            >>> w = g.tensor(name="W", dim=[6, 4, 3, 3])
            >>> dx = g.conv_dgrad(dy, w, padding=[1, 1], stride=[2, 2]).set_dim([2, 4, 10, 10])
            >>> _ = dx.set_output(True); _ = g.validate()
        """
        op = name or "conv_dgrad"
        params = _conv_params(op, dy, padding, pre_padding, post_padding, stride, dilation)
        return self._add_node(OpKind.CONV_DGRAD, name, compute_data_type, {"y_uid": dy, "w_uid": w},
                              ["x_uid"], params)[0]

    def conv_wgrad(self, dy, x, padding=None, pre_padding=None, post_padding=None, stride=None, dilation=None,
                   compute_data_type=None, name=None):
        """Gradient of :meth:`conv_fprop` with respect to its filter w.

        dy ``[N, K, *O]`` and x ``[N, C, *S]`` give dw ``[K, C/G, *R]``. The attributes are
        the forward convolution's. dw's dims cannot be inferred (they fix the groups and
        the kernel size): set them with ``dw.set_dim([...])``.

        Args:
            dy: gradient of the forward output.
            x: the forward input.
            padding, pre_padding, post_padding, stride, dilation: as for conv_fprop.
            compute_data_type: accumulation type (FLOAT when unset).
            name: node name.

        Returns:
            The virtual output tensor dw (set its dims).

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> dy = g.tensor(name="dY", dim=[2, 6, 5, 5])
            >>> x = g.tensor(name="X", dim=[2, 4, 10, 10])
            >>> dw = g.conv_wgrad(dy, x, padding=[1, 1], stride=[2, 2]).set_dim([6, 4, 3, 3])
            >>> _ = dw.set_output(True); _ = g.validate()
        """
        op = name or "conv_wgrad"
        params = _conv_params(op, x, padding, pre_padding, post_padding, stride, dilation)
        return self._add_node(OpKind.CONV_WGRAD, name, compute_data_type, {"y_uid": dy, "x_uid": x},
                              ["w_uid"], params)[0]

