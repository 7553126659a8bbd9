"""docs/api.md covers the public API: every name, method, op, parameter and enum member.

The lists come from the code at test time (``hd.__all__``, ``dir(hd.Graph)``, the op registry, the
enums, function signatures), so a name added later fails this test until it is documented.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import re

import hipdnn_iree as hd
from harness import REPO
from hipdnn_iree import backend
from graph_ir.opdef import OPS
from graph_ir.desc import OpKind
from graph_ir.ops.pointwise import ARITY

DOC_PATH = os.path.join(REPO, "docs", "api.md")


def _doc() -> str:
    with open(DOC_PATH, encoding="utf-8") as f:
        return f.read()


def _spans(text: str) -> list[str]:
    """Inline code spans (`...`) of the page."""
    return re.findall(r"`([^`\n]+)`", text)


def _in_spans(text: str, word: str) -> bool:
    pat = re.compile(rf"(?<![\w]){re.escape(word)}(?!\w)")
    return any(pat.search(s) for s in _spans(text))


def _section(text: str, title: str) -> str:
    """The text under the heading whose code span is exactly ``title``, up to the next heading of
    the same or a higher level ('' if there is no such heading)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(#+) ", line)
        if m and f"`{title}`" in line:
            level = len(m.group(1))
            out = []
            for nxt in lines[i + 1:]:
                n = re.match(r"^(#+) ", nxt)
                if n and len(n.group(1)) <= level:
                    break
                out.append(nxt)
            return "\n".join(out)
    return ""


def _table(section: str) -> dict[str, list[str]]:
    """Rows ``| `NAME` | col | ... |`` of a section: NAME -> the other cells."""
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\|\s*`(\w+)`\s*\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def _params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls") and not p.startswith("_")]


def _documented_call(text: str, name: str, params: list[str]) -> bool:
    """Some code span calls ``name(`` and names every parameter."""
    call = re.compile(rf"(?:^|[.\s]){re.escape(name)}\(")
    return any(call.search(s) and all(re.search(rf"\b{re.escape(p)}\b", s) for p in params) for s in _spans(text))


def _public(cls) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


def _backend_defined() -> list[str]:
    return sorted(n for n, o in vars(backend).items()
                  if not n.startswith("_") and getattr(o, "__module__", None) == backend.__name__)


ENUMS = {"hd.DataType": hd.DataType, "hd.PointwiseMode": hd.PointwiseMode, "hd.ReductionMode": hd.ReductionMode,
         "hd.NormFwdPhase": hd.NormFwdPhase, "hd.Status": hd.Status, "backend.Attribute": backend.Attribute}


def missing(text: str) -> list[str]:
    """Everything public that ``text`` (the page) fails to document, as readable items."""
    out = []
    # hd.__all__
    for n in hd.__all__:
        if not _in_spans(text, f"hd.{n}"):
            out.append(f"hd.{n}")
    # module-level functions: called with all their parameters
    for n in ("create_handle", "save_plan", "load_plan", "empty_aligned", "engine_id_from_name"):
        if not _documented_call(text, f"hd.{n}", _params(getattr(hd, n))):
            out.append(f"hd.{n}({', '.join(_params(getattr(hd, n)))})")
    # hd.Graph: every public method with its parameters, properties by name
    for n in _public(hd.Graph):
        attr = inspect.getattr_static(hd.Graph, n)
        if isinstance(attr, property):
            if not _in_spans(text, n):
                out.append(f"hd.Graph.{n}")
        elif not _documented_call(text, n, _params(getattr(hd.Graph, n))):
            out.append(f"hd.Graph.{n}({', '.join(_params(getattr(hd.Graph, n)))})")
    # graph ops: one heading each, with the full signature
    headings = [line for line in text.splitlines() if line.startswith("#")]
    frontend_methods = {k: d.frontend_method for k, d in OPS.items() if d.supported}
    for kind, n in frontend_methods.items():
        params = _params(getattr(hd.Graph, n))
        if not any(f"g.{n}(" in h and all(re.search(rf"\b{p}\b", h) for p in params) for h in headings):
            out.append(f"op heading g.{n}({', '.join(params)}) [{kind.name}]")
    # hd.TensorAttributes
    for n in _public(hd.TensorAttributes):
        if not _documented_call(text, n, _params(getattr(hd.TensorAttributes, n))):
            out.append(f"hd.TensorAttributes.{n}")
    # hd.Handle attributes (class and instance)
    h = hd.create_handle(device=None, target="llvm-cpu:x86-64")
    for n in sorted(set(_public(hd.Handle)) | {k for k in vars(h) if not k.startswith("_")}):
        if not _in_spans(text, n):
            out.append(f"hd.Handle.{n}")
    # dataclass fields
    for cls in (hd.PlanTensor, backend.EngineConfig, backend.ExecutionPlanDescriptor):
        for f in dataclasses.fields(cls):
            if not _in_spans(text, f.name):
                out.append(f"{cls.__name__}.{f.name}")
    for n in _public(backend.ExecutionPlanDescriptor):
        if callable(getattr(backend.ExecutionPlanDescriptor, n)) and not _documented_call(
                text, n, _params(getattr(backend.ExecutionPlanDescriptor, n))):
            out.append(f"ExecutionPlanDescriptor.{n}")
    # hd.backend: functions (with parameters) and classes defined there
    for n in _backend_defined():
        obj = getattr(backend, n)
        if inspect.isfunction(obj):
            if not _documented_call(text, f"backend.{n}", _params(obj)):
                out.append(f"backend.{n}({', '.join(_params(obj))})")
        elif not _in_spans(text, f"backend.{n}"):
            out.append(f"backend.{n}")
    # enums: a table row per member under the enum's heading, with its value (arity for modes)
    for title, enum in ENUMS.items():
        rows = _table(_section(text, title))
        for m in enum:
            cells = rows.get(m.name)
            if cells is None:
                out.append(f"{title}.{m.name}")
                continue
            want = (("—" if m == hd.PointwiseMode.NOT_SET else str(ARITY.get(int(m), "?")))
                    if enum is hd.PointwiseMode else str(int(m)))
            if cells[0] != want:
                out.append(f"{title}.{m.name}: documented {cells[0]!r}, code says {want!r}")
    return out


def test_api_reference_documents_every_public_name_op_and_enum_member():
    assert missing(_doc()) == []


def test_pointwise_arity_table_matches_the_lowering():
    rows = _table(_section(_doc(), "hd.PointwiseMode"))
    documented = {m: int(rows[m.name][0]) for m in hd.PointwiseMode if m != hd.PointwiseMode.NOT_SET}
    assert documented == {m: ARITY[int(m)] for m in documented}
    # the backward modes' argument order is spelled out
    section = _section(_doc(), "hd.PointwiseMode")
    assert "in_0 = dy" in section and "in_1 = x" in section


def test_the_checker_reports_what_is_taken_out():
    text = _doc()
    cut = re.sub(r"^\| `GELU_BWD` \|.*\n", "", text, flags=re.M)
    cut = re.sub(r"^\| `EXECUTION_PLAN_TENSORS_EXT` \|.*\n", "", cut, flags=re.M)
    cut = cut.replace("`g.get_compiled_plan_tensors()`", "`g.tensors`")
    cut = cut.replace("hd.engine_id_from_name", "hd.engine_id")
    cut = re.sub(r"^\| `AMAX` \| 5 \|", "| `AMAX` | 4 |", cut, flags=re.M)
    cut = re.sub(r"^(### 5\.9 `g\.rmsnorm\(x, scale), epsilon=1e-5", r"\1", cut, flags=re.M)
    got = missing(cut)
    assert "hd.PointwiseMode.GELU_BWD" in got
    assert "backend.Attribute.EXECUTION_PLAN_TENSORS_EXT" in got
    assert "hd.Graph.get_compiled_plan_tensors()" in got
    assert "hd.engine_id_from_name" in got
    assert "hd.ReductionMode.AMAX: documented '4', code says '5'" in got
    assert any(g.startswith("op heading g.rmsnorm(") for g in got)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """The fenced ```python blocks of the page: (line number, code)."""
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)]


def run_blocks(text: str, folder) -> int:
    """Runs each block on the CPU in a fresh namespace inside ``folder``; returns how many ran."""
    blocks = python_blocks(text)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        for line, code in blocks:
            try:
                exec(compile(code, f"docs/api.md:{line}", "exec"), {"__name__": "api_doc_example"})
            except Exception as e:  # noqa: BLE001 - reported with the block's line
                raise AssertionError(f"docs/api.md block at line {line} failed: {type(e).__name__}: {e}") from e
    finally:
        os.chdir(cwd)
    return len(blocks)


def test_every_python_block_of_the_page_runs_and_its_stated_results_hold(tmp_path):
    """The ``assert``s in the blocks are the results the page states (values, statuses, untouched buffers)."""
    assert run_blocks(_doc(), tmp_path) >= 4, "the page lost its runnable examples"


def test_the_block_runner_fails_on_a_false_statement(tmp_path):
    import pytest
    bad = "```python\nimport hipdnn_iree as hd\nassert hd.__version__ == '0.0.1'\n```\n"
    with pytest.raises(AssertionError, match="block at line 2 failed"):
        run_blocks(bad, tmp_path)


def test_statements_checked_against_the_code():
    """Facts on the page that a block cannot show: the version, and no name that does not exist."""
    text = _doc()
    assert f'(`"{hd.__version__}"`)' in text
    for name in re.findall(r"`backend\.(\w+)\(", text):
        assert hasattr(backend, name), f"docs/api.md documents backend.{name}, which does not exist"
    assert "IREE plans cannot execute it today" not in text and "no leaky ReLU" not in text


def _op_section(text: str, number: str) -> str:
    """The text of op section ``number`` (e.g. "5.8"), up to the next heading."""
    m = re.search(rf"^### {re.escape(number)} .*?\n(.*?)(?=^#)", text, flags=re.M | re.S)
    assert m, f"docs/api.md has no section {number}"
    return m.group(1)


def test_norm_sections_state_the_scale_rule_the_lowering_uses():
    """5.8/5.9 and the oddities state hipDNN's rule (the trailing axes where the scale has x's
    extents, ``lowering.ops.norm.norm_axes``), not "every axis but axis 0"."""
    from graph_ir.ops._norm import norm_axes
    text = _doc()
    ln, rms = _op_section(text, "5.8"), _op_section(text, "5.9")
    assert "but axis 0" not in text
    assert "trailing axes where `scale` has x's extents" in ln
    assert "the axes the scale spans" in rms and "layernorm's rule" in rms
    # the examples the sections give are the lowering's answers
    assert "`[1, 1, D]` (or `[D]`) normalize **each token over D**" in ln
    assert norm_axes((2, 5, 8), (1, 1, 8)) == norm_axes((2, 5, 8), (8,)) == (2,)
    assert "`[1, S, D]` normalizes over S and D" in ln and norm_axes((2, 5, 8), (1, 5, 8)) == (1, 2)
