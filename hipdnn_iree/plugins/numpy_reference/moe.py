"""numpy reference for moe_grouped_matmul and moe_grouped_matmul_bwd: a loop over the groups of the
offset table, each a float64 matmul of its rows; it shares no code with the lowering.

Group ``g`` of ``G`` owns the routed rows ``[offset[g], offset[g + 1])`` (the last group up to the
routed row count) and multiplies by ``weight[g % E]``. Per routed row r: NONE reads token row r and
writes output row r; GATHER reads token row ``token_index[r]``; SCATTER writes output row
``token_index[r] * top_k + token_ks[r]``. Output rows no group writes are 0. The backward sums
``token[r]^T doutput[r]`` over each group's rows into ``dweight[g]``.

As hipDNN's CPU reference, execute-time routing data outside the contract is refused (BAD_PARAM
naming the tensor and the value): offsets that decrease or leave ``[0, routed rows]``, token
indices outside the token rows, ``token_ks`` outside ``[0, top_k)``, destinations outside the
output or written twice.
"""
from __future__ import annotations

import numpy as np

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status
from hipdnn_iree.plugins.numpy_reference.registry import register_reference
from graph_ir.desc import NodeDesc, OpKind

NONE, GATHER, SCATTER = 0, 1, 2


def _ints(a, what: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype not in (np.int32, np.int64):
        raise HipdnnError(Status.BAD_PARAM, f"NUMPY_REFERENCE: {what} has element type {a.dtype}: it must be "
                                            "INT32 or INT64")
    return a.reshape(-1).astype(np.int64)


def group_ranges(offsets, rows: int, what: str = "moe_grouped_matmul") -> list[tuple[int, int]]:
    """``[(start, end)]`` per group; BAD_PARAM when the offsets decrease or leave ``[0, rows]``."""
    off = _ints(offsets, f"{what}: first_token_offset")
    for g, o in enumerate(off):
        if not 0 <= o <= rows:
            raise HipdnnError(Status.BAD_PARAM, f"NUMPY_REFERENCE: {what}: first_token_offset[{g}] = {o} is outside "
                                                f"[0, {rows}] (the routed rows)")
        if g and o < off[g - 1]:
            raise HipdnnError(Status.BAD_PARAM, f"NUMPY_REFERENCE: {what}: first_token_offset[{g}] = {o} is below "
                                                f"first_token_offset[{g - 1}] = {off[g - 1]}: offsets must not decrease")
    ends = list(off[1:]) + [rows]
    return [(int(s), int(e)) for s, e in zip(off, ends)]


def moe_forward(token, weight, offsets, mode=NONE, top_k=0, token_index=None, token_ks=None) -> np.ndarray:
    """The output ``[1, rows, N]`` in float64 (rows: token_index's for GATHER, token's otherwise)."""
    tok = np.asarray(token, np.float64)[0]
    w = np.asarray(weight, np.float64)
    m, e = tok.shape[0], w.shape[0]
    idx = None if mode == NONE else _ints(token_index, "moe_grouped_matmul: token_index")
    ks = _ints(token_ks, "moe_grouped_matmul: token_ks") if mode == SCATTER else None
    routed = idx.shape[0] if mode == GATHER else m
    out = np.zeros((routed, w.shape[2]))
    written = np.zeros(routed, bool)
    for g, (start, end) in enumerate(group_ranges(offsets, routed)):
        r = np.arange(start, end)
        src, dst = r, r
        if mode == GATHER:
            src = idx[r]
        elif mode == SCATTER:
            if ((ks[r] < 0) | (ks[r] >= top_k)).any():
                bad = r[(ks[r] < 0) | (ks[r] >= top_k)][0]
                raise HipdnnError(Status.BAD_PARAM, f"NUMPY_REFERENCE: moe_grouped_matmul: token_ks[{bad}] = "
                                                    f"{ks[bad]} is outside [0, top_k = {top_k})")
            dst = idx[r] * top_k + ks[r]
        for what, v, hi in (("token row", src, m), ("output row", dst, routed)):
            if ((v < 0) | (v >= hi)).any():
                bad = v[(v < 0) | (v >= hi)][0]
                raise HipdnnError(Status.BAD_PARAM, f"NUMPY_REFERENCE: moe_grouped_matmul: routed {what} {bad} is "
                                                    f"outside [0, {hi})")
        if written[dst].any() or len(np.unique(dst)) != len(dst):
            raise HipdnnError(Status.BAD_PARAM, "NUMPY_REFERENCE: moe_grouped_matmul: two routed rows write one "
                                                "output row (token_index * top_k + token_ks repeats)")
        written[dst] = True
        out[dst] = tok[src] @ w[g % e]
    return out[None]


def moe_backward(doutput, token, offsets) -> np.ndarray:
    """``dweight`` ``[G, K, N]`` in float64."""
    dy = np.asarray(doutput, np.float64)[0]
    tok = np.asarray(token, np.float64)[0]
    ranges = group_ranges(offsets, tok.shape[0], "moe_grouped_matmul_bwd")
    dw = np.zeros((len(ranges), tok.shape[1], dy.shape[1]))
    for g, (start, end) in enumerate(ranges):
        dw[g] = tok[start:end].T @ dy[start:end]
    return dw


@register_reference(OpKind.MOE_GROUPED_MATMUL)
def ref_moe_grouped_matmul(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    reads_index = at.mode in (GATHER, SCATTER)
    out = moe_forward(env[at.token_uid], env[at.weight_uid], env[at.first_token_offset_uid], at.mode, at.top_k,
                      env[at.token_index_uid] if reads_index else None,
                      env[at.token_ks_uid] if at.mode == SCATTER else None)
    return {at.output_uid: out}


@register_reference(OpKind.MOE_GROUPED_MATMUL_BWD)
def ref_moe_grouped_matmul_bwd(node: NodeDesc, env: dict) -> dict:
    at = node.attrs
    return {at.dweight_uid: moe_backward(env[at.doutput_uid], env[at.token_uid], env[at.first_token_offset_uid])}
