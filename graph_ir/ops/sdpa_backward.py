"""sdpa_backward: the gradients of scaled dot-product attention. Its shape rules, dynamic-shape rule and
OpDef (no MLIR); q/k/v/mask/scale rules are sdpa's (graph_ir/ops/sdpa.py)."""
from __future__ import annotations

from graph_ir.desc import ABSENT, GraphError, OpKind, SdpaBackwardAttrs
from graph_ir.dynamic import Facts
from graph_ir.opdef import OpDef, register
from graph_ir.ops.sdpa import check_common, dynamic_qkvo, dynamic_stats, stats_shape


def infer(node, dims) -> dict:
    """Checks q/k/v/mask/scale as sdpa does, then o, do and stats against them; returns dq, dk and dv's
    dims (q's, k's and v's)."""
    at = node.attrs
    o_dims = check_common(node, dims)
    q, k, v = tuple(dims(at.q_uid)), tuple(dims(at.k_uid)), tuple(dims(at.v_uid))
    for field, uid in (("o_uid", at.o_uid), ("do_uid", at.do_uid)):
        got = tuple(dims(uid))
        if got != o_dims:
            raise GraphError(f"field '{field}' dims {list(got)} differ from the attention output's "
                             f"{list(o_dims)} [B, Hq, Sq, Dv] (q {list(q)}, v {list(v)})")
    st = tuple(dims(at.stats_uid))
    if st != stats_shape(q):
        raise GraphError(f"field 'stats_uid' dims {list(st)}: the statistics of q {list(q)} have dims "
                         f"{list(stats_shape(q))} [B, Hq, Sq, 1]")
    return {at.dq_uid: q, at.dk_uid: k, at.dv_uid: v}


def dynamic(f: Facts, node):
    """sdpa's rule (B, S_q, S_kv vary) for q/k/v/o; do follows o, stats q, dq/dk/dv q/k/v."""
    at = node.attrs
    dynamic_qkvo(f, at)
    dynamic_stats(f, at.q_uid, at.stats_uid)
    for grad, of in ((at.do_uid, at.o_uid), (at.dq_uid, at.q_uid), (at.dk_uid, at.k_uid), (at.dv_uid, at.v_uid)):
        if grad == ABSENT:
            continue
        for i in range(len(f.dims(of))):
            f.union((of, i), (grad, i))


OPDEF = register(OpDef(OpKind.SDPA_BACKWARD, SdpaBackwardAttrs, infer, dynamic, frontend_method="sdpa_backward",
                       facade_methods=("sdpa_backward",), traits=frozenset({"attention"}),
                       stride_order_from=(("dq_uid", "q_uid"), ("dk_uid", "k_uid"), ("dv_uid", "v_uid"))))
