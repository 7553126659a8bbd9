"""CUSTOM_OP -> the registered function (graph_ir/custom_ops.py), added to the module as a private
function and called from ``@main``.

The node's id resolves to the registration of this process: its text, or the text its callable
writes for the node's tensor types and bytes. The function's signature must be the node's: one
argument per input and one result per output, each ``tensor<dims x elem>`` with the tensor's logical
dims and element type (as in ``@main``'s body; scalars are ``tensor<elem>``). The function goes into
the module under a symbol of its own (``@custom_<n>_<id>``), so the module, the compile cache key (the
module's text) and the compiled plan all carry it.
"""
from __future__ import annotations

import re

from lowering._context import LowerContext
from lowering._emit import Value, is_static, tensor_type
from lowering._registry import register_lowering
from graph_ir import custom_ops
from graph_ir._fbs.graph_generated import DataType as D
from graph_ir.desc import GraphError, NodeDesc, OpKind
from graph_ir.dtypes import data_type_name

# The data types a custom op's tensors may have: those whose values are their buffers' elements
# (UINT8 is i8 in the function, as in the module); 8- and 4-bit floats are codes decoded inside.
DATA_TYPES = (D.FLOAT, D.HALF, D.BFLOAT16, D.DOUBLE, D.INT8, D.UINT8, D.INT32, D.INT64, D.BOOLEAN)

# The lines around each function in the module: verify_mlir (lowering/_lower.py) checks a function
# alone when the module fails, to say that it is the registered code that is wrong.
_BEGIN = "// custom op {op_id} (node '{node}'): the registered function"
_END = "// end of custom op {op_id}"
_BEGIN_RE = re.compile(r"^// custom op (\S+) \(node '(.*)'\): the registered function$")


def _printable(name: str) -> str:
    """``name`` fit for a comment line (a node name may hold any character)."""
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in name)[:200]


def _what(node: NodeDesc) -> str:
    return f"custom_op '{node.name}' ({node.attrs.custom_op_id!r})"


def _text(op: custom_ops.CustomOp, node: NodeDesc, ins, outs) -> custom_ops.Function:
    if op.function is not None:
        return op.function
    try:
        text = op.mlir(ins, outs, node.attrs.data)
    except Exception as e:   # NOTE: the user's callable; its failure is the caller's
        raise GraphError(f"{_what(node)}: the registered mlir callable raised {type(e).__name__}: {e}") from None
    if not isinstance(text, str):
        raise GraphError(f"{_what(node)}: the registered mlir callable returned {type(text).__name__}, "
                         "not MLIR text (str)")
    try:
        return custom_ops.parse_function(text)
    except custom_ops.CustomOpError as e:
        raise GraphError(f"{_what(node)}: the MLIR its callable wrote: {e}") from None


@register_lowering(OpKind.CUSTOM_OP)
def lower_custom_op(ctx: LowerContext, node: NodeDesc) -> None:
    at = node.attrs
    op = custom_ops.lookup(at.custom_op_id)
    if op is None:
        raise GraphError(f"node '{node.name}' (CUSTOM_OP): custom op {at.custom_op_id!r} is not registered in "
                         "this process (hd.register_custom_op)", "unsupported")
    for u in (*at.input_uids, *at.output_uids):
        t = ctx.tensor(u)
        if t.data_type not in DATA_TYPES:
            raise GraphError(f"{_what(node)}: tensor '{t.name}' (uid {u}) is {data_type_name(t.data_type)}; a "
                             f"custom op's tensors are one of {', '.join(data_type_name(d) for d in DATA_TYPES)}",
                             "unsupported")
    values = [ctx.value(u) for u in at.input_uids]
    dims = {u: ctx.dims(u) for u in (*at.input_uids, *at.output_uids)}
    if not all(is_static(d) for d in dims.values()):
        raise GraphError(f"{_what(node)}: its tensors have dims chosen at execute time; a custom op's "
                         "function has static types", "unsupported")
    want_in = [tensor_type(dims[u], v.elem) for u, v in zip(at.input_uids, values)]
    want_out = [tensor_type(dims[u], ctx.out_elem(u)) for u in at.output_uids]
    specs = {u: (tuple(dims[u]), ctx.tensor(u).data_type) for u in dims}     # what a callable is given
    fn = _text(op, node, [specs[u] for u in at.input_uids], [specs[u] for u in at.output_uids])
    _check_signature(node, fn, want_in, want_out)
    key = (at.custom_op_id, fn.text)
    symbol = ctx.function_symbols.get(key)
    if symbol is None:
        safe = re.sub(r"[^A-Za-z0-9_]", "_", at.custom_op_id)
        symbol = f"{ctx.symbol_prefix}custom_{len(ctx.function_symbols)}_{safe}"
        ctx.function_symbols[key] = symbol
        ctx.functions += [_BEGIN.format(op_id=at.custom_op_id, node=_printable(node.name)),
                          *fn.renamed(symbol).split("\n"), _END.format(op_id=at.custom_op_id)]
    ssa = ctx.em.fresh("call")
    n = len(want_out)
    ctx.em.emit(f"{ssa}{f':{n}' if n > 1 else ''} = func.call @{symbol}({', '.join(v.ssa for v in values)}) : "
                f"({', '.join(want_in)}) -> ({', '.join(want_out)})")
    for i, u in enumerate(at.output_uids):
        ctx.define(u, Value(f"{ssa}#{i}" if n > 1 else ssa, tuple(dims[u]), ctx.out_elem(u)))


def _check_signature(node: NodeDesc, fn: custom_ops.Function, want_in: list[str], want_out: list[str]) -> None:
    got = f"@{fn.name}{fn.signature()}"
    want = f"({', '.join(want_in)}) -> ({', '.join(want_out)})"
    for what, have, need, uids in (("argument", fn.args, want_in, node.attrs.input_uids),
                                   ("result", fn.results, want_out, node.attrs.output_uids)):
        if len(have) != len(need):
            raise GraphError(f"{_what(node)}: its function {got} has {len(have)} {what}(s), the node has "
                             f"{len(need)} {'input' if what == 'argument' else 'output'}(s): {want}")
        for i, (h, w) in enumerate(zip(have, need)):
            if h != w:
                raise GraphError(f"{_what(node)}: {what} {i} of its function {got} is {h}, but the node's "
                                 f"{'input' if what == 'argument' else 'output'} {i} (uid {uids[i]}) is {w}: "
                                 f"the function must be {want}")


def custom_functions(text: str):
    """``(op id, node name, function text)`` of each registered function in a module's text."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = _BEGIN_RE.match(line)
        if m:
            end = lines.index(_END.format(op_id=m.group(1)), i + 1)
            yield m.group(1), m.group(2), "\n".join(lines[i + 1:end])
