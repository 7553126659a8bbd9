"""Frontend methods for block-scale quantization (mixed into `hd.Graph`): block_scale_quantize and
block_scale_dequantize. Shape rules are the OpDefs' (graph_ir/ops/_block_scale.py); the arithmetic
is lowering/ops/block_scale.py's docstring."""
from __future__ import annotations

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugin_sdk.types import DataType, as_enum
from graph_ir.desc import OpKind

_SCALE_FOR = {DataType.FP8_E4M3: DataType.FP8_E8M0, DataType.FP8_E5M2: DataType.FP8_E8M0,
              DataType.FP4_E2M1: DataType.FP8_E4M3}


class BlockScaleOps:
    """Mixed into :class:`hd.Graph`."""

    def block_scale_quantize(self, x, block_size, axis=None, transpose=False, y_data_type=DataType.FP8_E4M3,
                             scale_data_type=None, compute_data_type=None, name=None):
        """Block-scaled quantization (cuDNN's BLOCK_SCALE_QUANTIZE): per run of ``block_size``
        elements along ``axis`` (None: the last), ``scale = round_up(amax / vmax)`` in the scale's
        type and ``y = x / scale`` rounded to nearest even, saturating. The E8M0 scale is cuDNN's
        round-up, not the OCP MX specification's floor rule (they differ where amax's significand
        exceeds vmax's; docs/api.md 8.1, which also says what infinities and NVFP4 saturation do).

        Recipes: MXFP8 (y FP8_E4M3 or FP8_E5M2, scale FP8_E8M0, block 32), NVFP4 (y FP4_E2M1,
        scale FP8_E4M3, block 16), MXFP4 (y FP4_E2M1, scale FP8_E8M0, block 32); a FLOAT scale
        is ``amax / vmax`` itself. ``scale_data_type`` None picks E8M0 for FP8 y and E4M3 for FP4 y.
        ``transpose=True`` lays y and scale out with the block axis innermost in memory (cuDNN's
        rule: x's axes from the innermost out, rotated to start at the axis) where their strides
        are left unset; the values are the same.

        Returns:
            ``(y, scale)``: y has x's dims, scale x's dims with ``dims[axis] / block_size``.

        Example:
            >>> import hipdnn_iree as hd
            >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            >>> x = g.tensor(name="x", uid=1, dim=[4, 64])
            >>> y, s = g.block_scale_quantize(x, 32)
            >>> y.get_data_type(), s.get_data_type()
            (<DataType.FP8_E4M3: 8>, <DataType.FP8_E8M0: 10>)
        """
        ydt = as_enum(DataType, y_data_type, "block_scale_quantize: y_data_type")
        sdt = _SCALE_FOR.get(ydt, DataType.FP8_E8M0) if scale_data_type is None else \
            as_enum(DataType, scale_data_type, "block_scale_quantize: scale_data_type")
        if not isinstance(block_size, int) or isinstance(block_size, bool):
            raise HipdnnError(Status.BAD_PARAM, f"block_scale_quantize: block_size must be an int, got {block_size!r}")
        params = {"block_size": int(block_size), "transpose": bool(transpose)}
        if axis is not None:
            params["axis"] = int(axis)
        y, s = self._add_node(OpKind.BLOCK_SCALE_QUANTIZE, name, compute_data_type, {"x_uid": x},
                              ["y_uid", "scale_uid"], params)
        y.set_data_type(ydt)
        s.set_data_type(sdt)
        return y, s

    def block_scale_dequantize(self, y, scale, block_size, compute_data_type=None, name=None):
        """``y * scale``, each scale element covering its block of the quantized ``y`` (cuDNN's
        BLOCK_SCALE_DEQUANTIZE; hipDNN's node calls y its x). ``block_size``: an int (along the axis
        where the scale's dims differ from y's) or a list, one size per trailing axis. The result
        takes the graph's io type (FLOAT unless set), or the type set on it, and y's dims.
        """
        sizes = [block_size] if isinstance(block_size, int) and not isinstance(block_size, bool) else block_size
        try:
            sizes = tuple(int(b) for b in sizes)
        except (TypeError, ValueError):
            raise HipdnnError(Status.BAD_PARAM, f"block_scale_dequantize: block_size must be an int or a list of "
                                                f"ints, got {block_size!r}") from None
        return self._add_node(OpKind.BLOCK_SCALE_DEQUANTIZE, name, compute_data_type, {"x_uid": y, "scale_uid": scale},
                              ["y_uid"], {"block_size": sizes})[0]
