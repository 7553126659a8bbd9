"""Docs must not call missing, refused or not implemented what the code supports.

Three checks over every page of docs/ (and README.md), each against the code, not against a list
kept here:

- graph_schema.md's two tables: a node type marked "refused" must be outside the op registry's
  lowered kinds (and one marked "lowers" inside it); a data type marked "refused" must be outside
  the lowering's supported types (and one marked "runs" inside them).
- Refusal claims (a section headed "missing" / "not implemented" / "not supported", a paragraph
  opened by "Not implemented:", a sentence or table row saying refused / not supported / not
  implemented / not lowered / missing / unsupported, or "no <feature>"): a backticked bare name in
  one must not be an op this project builds (an ``hd.Graph`` op method or hipDNN node type from
  the registry, or a ``cudnn.pygraph`` method outside ``NOT_SUPPORTED_METHODS``) nor a data type
  that runs.
- Features said in prose (SDPA statistics with grouped-query heads, the SDPA backward pass, rmsnorm's
  bias and training outputs, packed FP4, block-scale quantize/dequantize): where a refusal claim
  names one, a probe builds a tiny graph through ``check_support`` (no compile); the claim is
  stale if the probe gets through.

``test_the_checker_catches_*`` show each check failing on text the docs held before issue 44 fixed it.
"""
from __future__ import annotations

import functools
import os
import re

import pytest

import hipdnn_iree as hd
import hipdnn_iree.cudnn as cudnn
from harness import REPO

DOCS = sorted(f"docs/{n}" for n in os.listdir(os.path.join(REPO, "docs")) if n.endswith(".md")) + ["README.md"]

REFUSAL = re.compile(r"missing|refuse[ds]?\b|not implemented|not supported|unsupported|not lowered|NOT_SUPPORTED"
                     r"|\b[Nn]o (?:bias|training|stats|statistics|backward)\b")
MISSING_HEADING = re.compile(r"(?i)^#+ .*(missing|not implemented|not supported)")


def _read(path: str) -> str:
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


# -- what the code supports ----------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def supported_names() -> dict[str, str]:
    """Bare names of things that work -> what they are (for the message)."""
    import graph_ir.ops  # noqa: F401  (registers the OpDefs)
    from graph_ir.dtypes import SUPPORTED_DATA_TYPES
    from graph_ir.opdef import supported
    from graph_ir._fbs.graph_generated import DataType as D
    from hipdnn_iree.cudnn._graph import NOT_SUPPORTED_METHODS
    names: dict[str, str] = {}
    for d in supported():
        names[d.kind.name] = "a lowered hipDNN node type"
        if d.frontend_method:
            names[d.frontend_method] = "an hd.Graph op"
        for m in d.facade_methods:
            if m not in NOT_SUPPORTED_METHODS:
                names[m] = "a cudnn.pygraph op"
    for n, v in vars(D).items():
        if not n.startswith("_") and v in SUPPORTED_DATA_TYPES and v != D.UNSET:
            names[n] = "a data type that runs"
    return names


def _facade_graph():
    return cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                         compute_data_type=cudnn.data_type.FLOAT, handle=_handle())


@functools.lru_cache(maxsize=None)
def _handle():
    return cudnn.create_handle(device="cpu")


def _supports(g) -> bool:
    """Whether ``g`` (hd.Graph or pygraph) gets through check_support (nothing is compiled)."""
    try:
        if isinstance(g, hd.Graph):
            g.validate()
            g.build_operation_graph(hd.create_handle(device=None, target="llvm-cpu"))
        else:
            g.validate().build_operation_graph()
        g.create_execution_plans()
        g.check_support()
        return True
    except hd.HipdnnError:
        return False


def probe_sdpa_stats_grouped_query() -> bool:
    g = _facade_graph()
    q = g.tensor(name="q", dim=[1, 4, 8, 16], stride=[512, 128, 16, 1])
    k = g.tensor(name="k", dim=[1, 2, 8, 16], stride=[256, 128, 16, 1])
    v = g.tensor(name="v", dim=[1, 2, 8, 16], stride=[256, 128, 16, 1])
    o, st = g.sdpa(q=q, k=k, v=v, attn_scale=0.25, generate_stats=True)
    o.set_output(True).set_dim([1, 4, 8, 16]).set_stride([512, 128, 16, 1])
    st.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    return _supports(g)


def probe_sdpa_backward() -> bool:
    g = _facade_graph()
    dims, st = [1, 2, 8, 16], [256, 128, 16, 1]
    q, k, v, o, do = (g.tensor(name=n, dim=dims, stride=st) for n in ("q", "k", "v", "o", "do"))
    stats = g.tensor(name="stats", dim=[1, 2, 8, 1], stride=[16, 8, 1, 1], data_type=cudnn.data_type.FLOAT)
    for t in g.sdpa_backward(q=q, k=k, v=v, o=o, dO=do, stats=stats, attn_scale=0.25):
        t.set_output(True).set_dim(dims).set_stride(st)
    return _supports(g)


def probe_rmsnorm_bias_and_training() -> bool:
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[4, 8])
    s = g.tensor(name="s", uid=2, dim=[1, 8])
    b = g.tensor(name="b", uid=3, dim=[1, 8])
    y, inv_rms = g.rmsnorm(x, s, bias=b, forward_phase=hd.NormFwdPhase.TRAINING)
    y.set_output(True)
    inv_rms.set_output(True)
    return _supports(g)


def probe_fp4_packed() -> bool:
    from graph_ir.dtypes import CODES_PER_BYTE
    from graph_ir._fbs.graph_generated import DataType as D
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    y = g.tensor(name="y", uid=1, dim=[4, 32], data_type=hd.DataType.FP4_E2M1)
    s = g.tensor(name="s", uid=2, dim=[4, 2], data_type=hd.DataType.FP8_E4M3)
    g.block_scale_dequantize(y, s, 16).set_output(True)
    return CODES_PER_BYTE.get(D.FP4_E2M1) == 2 and _supports(g)


def probe_block_scale() -> bool:
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[4, 64])
    y, s = g.block_scale_quantize(x, 32)
    y.set_output(True)
    s.set_output(True)
    g.block_scale_dequantize(y, s, 32).set_output(True)
    return _supports(g)


FEATURES = [  # (what, regex over a refusal claim (with its section heading where the 4th item is True),
    #             probe: True when the code has it, heading)
    ("SDPA statistics with grouped-query heads", r"(?is)stat.*grouped-query|grouped-query.*stat",
     probe_sdpa_stats_grouped_query, False),
    ("the SDPA backward pass", r"(?i)(sdpa[ _]backward|backward pass)(?!\s*\|\s*lowers)", probe_sdpa_backward, False),
    ("rmsnorm's bias and training outputs", r"(?is)rmsnorm.*(no bias|no training|bias[^.]*refused|TRAINING are refused)",
     probe_rmsnorm_bias_and_training, True),
    ("packed FP4 (two codes per byte)", r"(?i)packed[^.|]*not implemented|two[- ]per[- ]byte[^.|]*not implemented",
     probe_fp4_packed, False),
    ("block-scale quantize / dequantize", r"(?i)block[- ]scale (de)?quantize[^|]*\|\s*refused", probe_block_scale,
     False),
]


# -- where the docs claim something is missing ---------------------------------------------------

def refusal_claims(text: str) -> list[tuple[str, str]]:
    """``(heading, claim)`` for each refusal claim of a markdown page: the whole body of a
    missing/not-implemented section, a paragraph opened by "Not implemented:", and each sentence,
    bullet or table row saying something is refused, missing or not supported."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    out, heading, in_missing = [], "", False
    for block in re.split(r"\n(?=#)|\n\s*\n", text):
        first = block.lstrip().splitlines()[0] if block.strip() else ""
        if first.startswith("#"):
            heading, in_missing = first, bool(MISSING_HEADING.match(first))
            block = block.lstrip()[len(first):]
        if in_missing:
            out += [(heading, item) for item in re.split(r"\n(?=\s*- )", block) if item.strip()]
            continue
        if block.lstrip().startswith("Not implemented:"):
            out.append((heading, block))
            continue
        for piece in re.split(r"\n(?=\s*[-|*] )|(?<=[.;])\s+(?=[A-Z`(])", block):
            if REFUSAL.search(piece):
                out.append((heading, piece))
    return out


def _bare_names(claim: str) -> list[str]:
    return [m for m in re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", claim)]


def stale_claims(path: str, text: str, probes: bool = True) -> list[str]:
    """Each claim of ``text`` (the page at ``path``) that something is missing which the code supports."""
    names = supported_names()
    bad = []
    if path.endswith("graph_schema.md"):
        bad += _schema_tables(text)
    for heading, claim in refusal_claims(text):
        for n in _bare_names(claim):
            leaf = n.rsplit(".", 1)[-1]
            if leaf in names:
                bad.append(f"{path}: `{n}` ({names[leaf]}) in a refusal claim: {claim.strip()[:160]!r}")
        if probes:
            for what, rx, probe, with_heading in FEATURES:
                if re.search(rx, (heading + "\n" if with_heading else "") + claim) and probe():
                    bad.append(f"{path}: {what} works but is claimed missing: {claim.strip()[:160]!r}")
    return bad


def _schema_tables(text: str) -> list[str]:
    from graph_ir.desc import LOWERED_KINDS, OpKind
    from graph_ir.dtypes import SUPPORTED_DATA_TYPES
    bad = []
    lowered = {int(k) for k in LOWERED_KINDS}
    kinds = {int(k) for k in OpKind}
    for m in re.finditer(r"^\| (\d+) \| (\w+Attributes\w*) \| [^|]+ \| ([^|]+) \|$", text, re.M):
        num, name, say = int(m.group(1)), m.group(2), m.group(3).strip()
        if num not in kinds:
            continue
        if say.startswith("refused") and num in lowered:
            bad.append(f"graph_schema.md: node {num} {name} is lowered but the table says {say!r}")
        if say.startswith("lowers") and num not in lowered:
            bad.append(f"graph_schema.md: node {num} {name} is not lowered but the table says {say!r}")
    for m in re.finditer(r"^\| (\d+) \| (\w+)(?: \(extension\))? \| ([^|]+) \|$", text, re.M):
        num, name, say = int(m.group(1)), m.group(2), m.group(3).strip()
        if re.match(r"\w+Attributes", name):
            continue
        if say.startswith(("refused", "parses, refused")) and num in SUPPORTED_DATA_TYPES:
            bad.append(f"graph_schema.md: data type {num} {name} runs but the table says {say!r}")
        if say.startswith("runs") and num not in SUPPORTED_DATA_TYPES:
            bad.append(f"graph_schema.md: data type {num} {name} is refused but the table says {say!r}")
    return bad


# -- the tests -----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", DOCS)
def test_no_doc_calls_a_supported_feature_missing(path):
    assert stale_claims(path, _read(path)) == []


def test_the_probes_see_what_works():
    # every probe passes today; a probe that stopped getting through would make its claims unchecked
    assert [what for what, _, probe, _ in FEATURES if not probe()] == []


def test_the_checker_catches_the_stale_schema_rows():
    old = ("| 15 | SdpaBackwardAttributes | SDPA backward | refused |\n"
           "| 14 | BlockScaleQuantizeAttributes | block-scale quantize | refused |\n"
           "| 11 | FP4_E2M1 | runs (likewise, one code per byte: the packed two-per-byte layout is not implemented) |\n"
           "| 14 | INT4 | parses, refused |\n")
    got = stale_claims("docs/graph_schema.md", old)
    assert any("node 15 SdpaBackwardAttributes is lowered" in b for b in got), got
    assert any("node 14 BlockScaleQuantizeAttributes is lowered" in b for b in got), got
    assert any("packed FP4" in b for b in got), got
    assert not any("INT4" in b for b in got), got        # INT4 is refused: a true claim


def test_the_checker_catches_the_stale_migration_and_api_claims():
    migration = ("## What is missing (each raises `cudnnGraphNotSupportedError` naming it)\n\n"
                 "- SDPA Stats with grouped-query heads (fewer K/V heads than Q heads), and the SDPA backward pass;\n"
                 "  dropout, ALiBi, padding masks.\n- Layernorm with `zero_centered_gamma`.\n")
    got = stale_claims("docs/cudnn_migration.md", migration)
    assert any("grouped-query" in b for b in got) and any("backward pass" in b for b in got), got
    api = ("### 5.9 `g.rmsnorm(x, scale, epsilon=1e-5, bias=None)`\n\n`y = x / sqrt(mean(x^2) + epsilon) * scale`. "
           "No bias, no training outputs. `epsilon` as for layernorm.\n")
    assert any("rmsnorm" in b for b in stale_claims("docs/api.md", api))
    # a bare op name in a missing list
    got = stale_claims("docs/x.md", "## What is missing\n\n- `sdpa_backward` and `rope`.\n", probes=False)
    assert len(got) == 1 and "`sdpa_backward`" in got[0], got


def test_true_claims_pass():
    text = ("## What is missing\n\n- `rope`, `slice`, dropout and paged caches.\n\n"
            "Not implemented: `block_scale_dequantize(is_negative_scale=True)`, FP6 and `INT4`.\n")
    assert stale_claims("docs/x.md", text) == []
