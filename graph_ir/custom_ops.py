"""Custom ops: what a CUSTOM_OP node's ``custom_op_id`` resolves to in this process.

hipDNN's CUSTOM_OP node names an operation ``"<plugin>.<op>"`` and carries opaque bytes. Here an id
resolves to a registration (``hd.register_custom_op``): MLIR text holding one ``func.func`` whose
arguments are the node's inputs and whose results are its outputs (ranked tensors in the graph's
logical dims), or a callable writing that text for the node's tensor types and bytes; optionally a
numpy reference for the NUMPY_REFERENCE engine. The lowering (lowering/ops/custom_op.py) renames the
function to a private symbol of the graph's module and calls it from ``@main``: a compiled plan holds
the code, so it restores and runs in a process that registered nothing.

:data:`REGISTRY` is this module's only state. It imports nothing of the project (``graph_ir.desc``
reads it for ``CustomOpAttrs.unsupported``); its errors are :class:`CustomOpError`, which each caller
turns into its own error type.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

MAX_ID_LENGTH = 256
# "<plugin>.<op>": dot-separated names, each a letter or '_' then letters, digits, '_' or '-'
_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)+")


class CustomOpError(ValueError):
    """A custom op id, registration or function text that is wrong (the message says how)."""


@dataclass(frozen=True)
class Function:
    """One ``func.func`` as the user wrote it: its symbol, its argument and result types (whitespace
    removed, attributes dropped) and its text from ``func.func`` to the closing brace of its body."""

    name: str
    args: tuple[str, ...]
    results: tuple[str, ...]
    text: str
    head: tuple[int, int]     # span of the visibility and symbol in ``text``, replaced by renamed()

    def renamed(self, symbol: str) -> str:
        """The function as a private function named ``@symbol``."""
        a, b = self.head
        return f"{self.text[:a]} private @{symbol}{self.text[b:]}"

    def signature(self) -> str:
        return f"({', '.join(self.args)}) -> ({', '.join(self.results)})"


@dataclass(frozen=True)
class CustomOp:
    """A registration. ``mlir``: the text, or ``mlir(inputs, outputs, data) -> text`` with
    ``inputs``/``outputs`` lists of ``(dims, data type code)``; ``function``: the text form, parsed."""

    op_id: str
    mlir: str | Callable
    reference: Callable | None = None
    function: Function | None = None


REGISTRY: dict[str, CustomOp] = {}


def check_op_id(op_id) -> str:
    """``op_id`` when it has the form ``"<plugin>.<op>"``; CustomOpError naming it otherwise."""
    if not isinstance(op_id, str):
        raise CustomOpError(f"custom op id must be a string \"<plugin>.<op>\", got {op_id!r}")
    if len(op_id) > MAX_ID_LENGTH or not _ID.fullmatch(op_id):
        raise CustomOpError(f"custom op id {op_id[:MAX_ID_LENGTH]!r} is not of the form \"<plugin>.<op>\": "
                            "dot-separated names (at least two) of letters, digits, '_' and '-', each starting "
                            f"with a letter or '_', {MAX_ID_LENGTH} characters at most")
    return op_id


def register(op_id, mlir, reference=None) -> CustomOp:
    """Registers (or replaces) ``op_id``; the text form is parsed now, so a wrong one fails here."""
    check_op_id(op_id)
    function = None
    if isinstance(mlir, str):
        function = parse_function(mlir)
    elif not callable(mlir):
        raise CustomOpError(f"custom op {op_id!r}: mlir must be MLIR text (str) or a callable "
                            f"(inputs, outputs, data) -> str, got {type(mlir).__name__}")
    if reference is not None and not callable(reference):
        raise CustomOpError(f"custom op {op_id!r}: reference must be a callable (inputs, data) -> list of arrays "
                            f"or None, got {type(reference).__name__}")
    op = CustomOp(op_id, mlir, reference, function)
    REGISTRY[op_id] = op
    return op


def unregister(op_id) -> None:
    if op_id not in REGISTRY:
        raise CustomOpError(f"custom op {op_id!r} is not registered (registered: {list(registered())})")
    del REGISTRY[op_id]


def lookup(op_id) -> CustomOp | None:
    return REGISTRY.get(op_id) if isinstance(op_id, str) else None


def registered() -> tuple[str, ...]:
    """The registered ids, sorted."""
    return tuple(sorted(REGISTRY))


# -- the function's text ----------------------------------------------------------------------
# A scan of the text, not an MLIR parse: registering needs no compiler, and the text goes into the
# module as written (the verifier reads it with the rest of the module).

_OPEN, _CLOSE = "([{<", ")]}>"
_FUNC = re.compile(r"(?<![\w.$@%])func\.func(?![\w.$])")
_SYMBOL = re.compile(r"@([A-Za-z_$.][\w$.-]*|\"[^\"]*\")")
_MODULE_HEAD = re.compile(r"\s*module(\s+@[\w$.-]+)?\s*\{\s*")


def _ws(m: str, i: int) -> int:
    """``i`` moved past whitespace."""
    while i < len(m) and m[i].isspace():
        i += 1
    return i


def _mask(text: str) -> str:
    """``text`` with comments blanked and string contents replaced (same length, same positions):
    what the scan below looks at."""
    out, i, n = list(text), 0, len(text)
    while i < n:
        if text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise CustomOpError("the MLIR text has an unterminated string literal")
            out[i + 1:j] = "_" * (j - i - 1)
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        else:
            i += 1
    return "".join(out)


def _match(m: str, i: int, pairs: str = "()[]{}<>") -> int:
    """The index of the bracket closing the one at ``m[i]`` (``->`` is not a closing ``>``)."""
    opens, closes = pairs[0::2], pairs[1::2]
    stack, j = [], i
    while j < len(m):
        c = m[j]
        if m.startswith("->", j):
            j += 2
            continue
        if c in opens:
            stack.append(closes[opens.index(c)])
        elif c in closes:
            if not stack or stack.pop() != c:
                break
            if not stack:
                return j
        j += 1
    raise CustomOpError(f"the MLIR text has an unbalanced '{m[i]}' at offset {i}")


def _top_level(m: str, a: int, b: int, stop) -> int:
    """The first index in ``m[a:b]`` outside brackets where ``stop(index)`` holds, else ``b``."""
    j = a
    while j < b:
        if m.startswith("->", j):
            j += 2
            continue
        if stop(j):
            return j
        if m[j] in _OPEN:
            j = _match(m, j) + 1
            continue
        j += 1
    return b


def _split(m: str, a: int, b: int) -> list[tuple[int, int]]:
    """The comma-separated items of ``m[a:b]`` (commas outside brackets), as spans; none when blank."""
    if not m[a:b].strip():
        return []
    out = []
    while True:
        c = _top_level(m, a, b, lambda j: m[j] == ",")
        out.append((a, c))
        if c >= b:
            return out
        a = c + 1


def _type(text: str, m: str, a: int, b: int) -> str:
    """The type at ``m[a:b]`` without trailing attributes or location, whitespace removed."""
    end = _top_level(m, a, b, lambda j: m[j] == "{" or m.startswith("loc(", j))
    t = "".join(text[a:end].split())
    if not t:
        raise CustomOpError(f"the function's signature has an empty type at offset {a}")
    return t


def parse_function(text) -> Function:
    """The one ``func.func`` of ``text`` (optionally inside ``module { ... }``); CustomOpError saying
    what is wrong otherwise."""
    if not isinstance(text, str):
        raise CustomOpError(f"the custom op's MLIR must be a str, got {type(text).__name__}")
    text = text.replace("\r\n", "\n")
    m = _mask(text)
    found = [x.start() for x in _FUNC.finditer(m)]
    if len(found) != 1:
        raise CustomOpError(f"the MLIR text holds {len(found)} func.func operations; it must hold exactly one "
                            "(the custom op's function)")
    start = found[0]
    i = start + len("func.func")
    head = i
    vis = re.compile(r"\s+(public|private|nested)\b").match(m, i)
    if vis:
        i = vis.end()
    sym = _SYMBOL.match(m, _ws(m, i))
    if sym is None:
        raise CustomOpError("func.func is not followed by its @name")
    name = text[sym.start(1):sym.end(1)].strip('"')
    i = _ws(m, sym.end())
    if not m.startswith("(", i):
        raise CustomOpError(f"func.func @{name}: expected '(' and the arguments after the name")
    close = _match(m, i, "()")
    args = []
    for a, b in _split(m, i + 1, close):
        piece = m[a:b].strip()
        if not piece.startswith("%"):
            raise CustomOpError(f"func.func @{name}: argument {len(args)} must be '%name: type', got "
                                f"{text[a:b].strip()!r}")
        colon = _top_level(m, a, b, lambda j: m[j] == ":")
        if colon >= b:
            raise CustomOpError(f"func.func @{name}: argument {len(args)} ({text[a:b].strip()!r}) has no type")
        args.append(_type(text, m, colon + 1, b))
    i = _ws(m, close + 1)
    results = []
    if m.startswith("->", i):
        i = _ws(m, i + 2)
        if m.startswith("(", i):
            close = _match(m, i, "()")
            results = [_type(text, m, a, b) for a, b in _split(m, i + 1, close)]
            i = close + 1
        else:
            end = _top_level(m, i, len(m), lambda j: m[j] == "{" or (
                m.startswith("attributes", j) and m[j - 1].isspace()))
            results = [_type(text, m, i, end)]
            i = end
        i = _ws(m, i)
    if m.startswith("attributes", i):
        i = _ws(m, i + len("attributes"))
        if not m.startswith("{", i):
            raise CustomOpError(f"func.func @{name}: expected '{{' after 'attributes'")
        i = _ws(m, _match(m, i, "{}") + 1)
    if not m.startswith("{", i):
        raise CustomOpError(f"func.func @{name} has no body: register a function definition, not a declaration")
    end = _match(m, i, "{}") + 1
    before, after = m[:start], m[end:]
    wrapped = _MODULE_HEAD.fullmatch(before) is not None and after.strip() == "}"
    if not wrapped and (before.strip() or after.strip()):
        extra = (before if before.strip() else after).strip()
        raise CustomOpError(f"func.func @{name}: the MLIR text holds more than the function ({extra[:60]!r}); "
                            "register one func.func, alone or in a plain 'module { ... }' (write affine maps "
                            "inline: aliases such as '#map = ...' are not supported)")
    return Function(name, tuple(args), tuple(results), text[start:end], (head - start, sym.end() - start))
