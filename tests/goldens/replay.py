"""Replays one recorded lowering (tests/goldens/lowerings.jsonl.xz; used by record.py and tests/test_goldens.py)."""
from __future__ import annotations

import base64
import hashlib
import json
import lzma
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load_lowerings(path: str | None = None) -> list[dict]:
    with lzma.open(path or os.path.join(HERE, "lowerings.jsonl.xz"), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def replay(rec: dict) -> dict:
    """The outcome of re-lowering ``rec``: ``{"sha256": ...}`` of the MLIR text or ``{"error": ...}``."""
    from graph_ir import decode_graph
    from lowering._lower import lower_graph
    from graph_ir.dynamic import ShapeSpec
    from lowering.policy import LoweringPolicy
    graph = None if rec["graph"] is None else base64.b64decode(rec["graph"])
    policy = None
    if rec["policy"] is not None:
        fields = json.loads(rec["policy"])
        fields.pop("version")
        policy = LoweringPolicy(**fields)
    spec = rec["shape_spec"]
    if spec is not None and not rec["shape_spec_text"]:
        spec = ShapeSpec.from_json(spec)
    try:
        desc = decode_graph(base64.b64decode(rec["desc"]) if rec["desc"] is not None else graph)
        text = lower_graph(desc, rec["target"], verify=False, graph_bytes=graph, policy=policy,
                           shape_spec=spec, specialize=rec["specialize"]).mlir
    except Exception as e:  # noqa: BLE001 - a refusal is a golden too
        return {"error": {"type": type(e).__name__, "kind": getattr(e, "kind", None), "message": str(e)}}
    return {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def describe(rec: dict) -> str:
    return (f"target {rec['target']!r}, source {rec['source']}, first seen in {rec['test'] or '(no test)'!r}, "
            f"policy {rec['policy']}, shape_spec {'set' if rec['shape_spec'] else 'none'}, "
            f"specialize {rec['specialize']}, graph sha256 "
            f"{hashlib.sha256(base64.b64decode(rec['graph'] or rec['desc'])).hexdigest()[:16]}")
