"""cuDNN FE's MoE methods of ``cudnn.pygraph``: ``moe_grouped_matmul`` and ``moe_grouped_matmul_bwd``,
each one ``hd.Graph`` node (hipDNN's MOE_GROUPED_MATMUL / MOE_GROUPED_MATMUL_BWD); mixed into ``pygraph``.

Signatures follow cuDNN FE's Python API (``python/pygraph``, documented in its
"MoE Grouped Matmul" page): ``top_k`` defaults to 1, ``compute_data_type`` to FLOAT. As cuDNN FE
infers them, the output is ``[1, rows, N]`` row-major and ``dweight`` ``[G, K, N]`` with
column-major inner strides ``[K*N, 1, K]`` (set the strides to change either).
"""
from __future__ import annotations

from hipdnn_iree.cudnn import _enums as E
from hipdnn_iree.cudnn._common import _translate
from hipdnn_iree.plugin_sdk.types import MoeGroupedMatmulMode


class MoeMethods:
    """The MoE op methods of ``pygraph`` (its state lives in pygraph.__init__)."""

    @_translate
    def moe_grouped_matmul(self, token, weight, first_token_offset, token_index=None, token_ks=None,
                           mode=E.moe_grouped_matmul_mode.NONE, top_k=1, compute_data_type=None, name=None):
        """The grouped matmul of routed token rows with their experts' weights (``hd.Graph.moe_grouped_matmul``
        has the semantics): ``token`` ``[1, M, K]`` (GATHER: ``[1, S, K]``), ``weight`` ``[E, K, N]``,
        ``first_token_offset`` ``[G, 1, 1]`` INT32; ``token_index`` for GATHER and SCATTER, ``token_ks``
        and ``top_k`` for SCATTER."""
        hd_mode = E.to_hd(MoeGroupedMatmulMode, mode, "moe_grouped_matmul mode")
        out = self._hd.moe_grouped_matmul(
            self._in(token, "token"), self._in(weight, "weight"), self._in(first_token_offset, "first_token_offset"),
            token_index=self._in(token_index, "token_index"), token_ks=self._in(token_ks, "token_ks"),
            mode=hd_mode, top_k=top_k, compute_data_type=self._cdt(compute_data_type), name=name or None)
        return self._settled([out], name, ("OUTPUT",))[0]

    @_translate
    def moe_grouped_matmul_bwd(self, doutput, token, first_token_offset, compute_data_type=None, name=None):
        """``dweight`` ``[G, K, N]``: per group of ``first_token_offset``, the sum of ``token[r]^T doutput[r]``
        over its rows (``hd.Graph.moe_grouped_matmul_backward``)."""
        dw = self._hd.moe_grouped_matmul_backward(
            self._in(doutput, "doutput"), self._in(token, "token"), self._in(first_token_offset, "first_token_offset"),
            compute_data_type=self._cdt(compute_data_type), name=name or None)
        res = self._settled([dw], name, ("DWEIGHT",))[0]
        dims = dw.get_dim()
        if dims and len(dims) == 3:        # a new output: no stride of the caller's yet
            _, k, n = dims
            dw.set_stride([k * n, 1, k])   # cuDNN FE's default for dweight: column-major K x N
        return res
