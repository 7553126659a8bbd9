"""MoE grouped matmul (hipDNN's MOE_GROUPED_MATMUL and MOE_GROUPED_MATMUL_BWD): the shape rules and the
dynamic-shape rule both OpDefs use (graph_ir/ops/moe_grouped_matmul.py, moe_grouped_matmul_bwd.py).

Shapes follow hipDNN's node validation and cuDNN FE's shape inference:

- ``token`` ``[1, M, K]``; ``weight`` ``[E, K, N]``; ``first_token_offset`` ``[G, 1, 1]`` with G a
  multiple of E (``G = batch * E``; group ``g`` multiplies by ``weight[g % E]``);
- GATHER: ``token_index`` ``[1, R, 1]``; the output is ``[1, R, N]`` (R routed rows read token rows);
- SCATTER: ``token_index`` and ``token_ks`` ``[1, M, 1]``, ``1 <= top_k <= E``; the output ``[1, M, N]``;
- NONE: the output ``[1, M, N]``; routing tensors given in a mode that does not read them are ignored;
- backward: ``doutput`` ``[1, M, N]``, ``token`` ``[1, M, K]``: ``dweight`` ``[G, K, N]`` (one gradient per
  group, cuDNN FE's inference: its expert count is the offset table's length).

The offsets' and routing tensors' values are execute-time data; their data types (INT32 or INT64)
are checked where tensors' types are known (the frontend method, the emitter, the reference).
"""
from __future__ import annotations

from graph_ir.desc import MOE_MODE_GATHER, MOE_MODE_NONE, MOE_MODE_SCATTER, ABSENT, GraphError
from graph_ir.dynamic import FIXED, Facts

MODE_NAMES = {MOE_MODE_NONE: "NONE", MOE_MODE_GATHER: "GATHER", MOE_MODE_SCATTER: "SCATTER"}


def _rank3(dims, field: str, shape: str, lead_one: bool = False, tail_one: bool = False) -> tuple[int, ...]:
    d = tuple(dims)
    if len(d) != 3 or (lead_one and d[0] != 1) or (tail_one and d[2] != 1):
        raise GraphError(f"field '{field}' has dims {list(d)}: it must be {shape}")
    return d


def _routing(at, field: str, dims, rows_what: str) -> int:
    """The row count of routing tensor ``field`` (``[1, rows, 1]``); required in the node's mode."""
    uid = getattr(at, f"{field}_uid")
    if uid == ABSENT:
        raise GraphError(f"field '{field}' is missing: mode {MODE_NAMES[at.mode]} reads it ({rows_what})")
    return _rank3(dims(uid), field, "[1, rows, 1]", lead_one=True, tail_one=True)[1]


def check_moe(at, dims) -> dict:
    """Validates a MOE_GROUPED_MATMUL node; ``{output uid: [1, rows, N]}``."""
    if at.mode not in MODE_NAMES:
        raise GraphError(f"field 'mode' value {at.mode}: use hd.MoeGroupedMatmulMode.NONE, GATHER or SCATTER")
    _, m, k = _rank3(dims(at.token_uid), "token", "[1, tokens, K]", lead_one=True)
    e, kw, n = _rank3(dims(at.weight_uid), "weight", "[experts, K, N]")
    if kw != k:
        raise GraphError(f"field 'weight' has dims {[e, kw, n]}: its K ({kw}) differs from the token's K ({k}, "
                         f"token dims [1, {m}, {k}])")
    g = _rank3(dims(at.first_token_offset_uid), "first_token_offset", "[groups, 1, 1]")
    if g[1:] != (1, 1):
        raise GraphError(f"field 'first_token_offset' has dims {list(g)}: it must be [groups, 1, 1]")
    if g[0] % e:
        raise GraphError(f"field 'first_token_offset' has {g[0]} groups: the count must be a multiple of the "
                         f"expert count {e} (weight dims [{e}, {k}, {n}]; groups = batch * experts)")
    rows = m
    if at.mode == MOE_MODE_GATHER:
        rows = _routing(at, "token_index", dims, "the token row each routed row reads")
    elif at.mode == MOE_MODE_SCATTER:
        for f in ("token_index", "token_ks"):
            r = _routing(at, f, dims, "with top_k, the output row each routed row writes")
            if r != m:
                raise GraphError(f"field '{f}' has {r} rows: SCATTER needs one per token row ({m})")
        if isinstance(at.top_k, bool) or not 1 <= at.top_k <= e:
            raise GraphError(f"field 'top_k' value {at.top_k}: SCATTER needs 1 <= top_k <= the expert count ({e})")
    return {at.output_uid: (1, rows, n)}


def check_moe_backward(at, dims) -> dict:
    """Validates a MOE_GROUPED_MATMUL_BWD node; ``{dweight uid: [G, K, N]}``."""
    _, m, n = _rank3(dims(at.doutput_uid), "doutput", "[1, tokens, N]", lead_one=True)
    _, mt, k = _rank3(dims(at.token_uid), "token", "[1, tokens, K]", lead_one=True)
    if mt != m:
        raise GraphError(f"field 'token' has {mt} rows but doutput has {m} (token [1, {mt}, {k}], "
                         f"doutput [1, {m}, {n}]): they must be the same rows")
    g = _rank3(dims(at.first_token_offset_uid), "first_token_offset", "[groups, 1, 1]")
    if g[1:] != (1, 1):
        raise GraphError(f"field 'first_token_offset' has dims {list(g)}: it must be [groups, 1, 1]")
    return {at.dweight_uid: (g[0], k, n)}


def dynamic_fixed(f: Facts, node) -> None:
    """Every dim of every operand fixed: the groups' row ranges are execute-time data and the routed
    row counts size the in-graph expert lookup, so the op is compiled at its built dims."""
    for u in (*node.attrs.inputs(), *node.attrs.outputs()):
        if not f.graph.tensor(u).is_scalar:
            for i in range(len(f.dims(u))):
                f.mark((u, i), FIXED)
