"""Goldens: the lowering's output, the frontends' graph encoding and the error corpus must not change.

Regenerate with ``.venv/bin/python tests/goldens/record.py`` (its docstring says how) only when a
change of behaviour is intended; a refactor that is meant to preserve behaviour must pass as is.

- ``tests/goldens/lowerings.jsonl.xz``: every distinct ``lower_graph`` call of a recorded run of the
  whole test suite and the samples (lowering/_goldens.py records them while
  ``HIPDNN_IREE_RECORD_GOLDENS`` names a file and tests/goldens/site registers its sink), plus the
  builders' lowerings. Each is re-lowered with tests/goldens/replay.py: the ``GraphDesc`` is
  ``decode_graph`` of ``desc`` (stored where the lowered desc's encoding differs from the graph
  bytes the caller passed) or else of ``graph``; ``graph`` is passed as ``graph_bytes`` (it goes into
  the module's reflection), with the stored target, policy, shape spec and specialize flag, without
  the IREE verifier. The sha256 of the MLIR text (or the error's type, kind and message) must match.
- ``tests/goldens/frontend.json``: the graph bytes are goldens too. Frontend graphs cannot be
  rebuilt from a recording (building them is code), so tests/goldens/builders.py holds a table of
  named builders, through ``hd.Graph`` and the cuDNN facade, covering every op the frontends emit;
  each is rebuilt and the sha256 of its encoded bytes compared. Their lowerings are in the corpus
  above as well (record.py lowers each for three targets, statically and dynamically).
- ``tests/goldens/errors.json``: tests/goldens/invalid.py's bad calls, (status, message) exactly.

Each check fails naming the first differing case (and how many differ).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens")
sys.path.insert(0, HERE)

import builders  # noqa: E402
import invalid  # noqa: E402
from replay import describe, load_lowerings, replay  # noqa: E402

from lowering._goldens import ENV  # noqa: E402


def _load(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return json.load(f)


def _fail(what, diffs):
    name, want, got = diffs[0]
    pytest.fail(f"{len(diffs)} {what} differ from the goldens; first: {name}\n  stored: {want}\n  now:    {got}",
                pytrace=False)


def test_lowerings_match_goldens(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    recs = load_lowerings()
    assert len(recs) > 100, len(recs)
    diffs = []
    for i, rec in enumerate(recs):
        want = {k: rec[k] for k in ("sha256", "error") if k in rec}
        got = replay(rec)
        if got != want:
            diffs.append((f"lowering #{i} ({describe(rec)})", want, got))
    if diffs:
        _fail("lowering(s)", diffs)


def test_frontend_graph_bytes_match_goldens():
    stored = _load("frontend.json")
    assert sorted(stored) == sorted(builders.BUILDERS), "builders.py and frontend.json disagree: re-record"
    diffs = []
    for name, fn in builders.BUILDERS.items():
        got = hashlib.sha256(fn()).hexdigest()
        if got != stored[name]:
            diffs.append((f"builder {name!r} (tests/goldens/builders.py)", stored[name], got))
    if diffs:
        _fail("frontend graph encoding(s)", diffs)


def test_invalid_corpus_matches_goldens():
    stored = _load("errors.json")
    assert sorted(stored) == sorted(invalid.CASES), "invalid.py and errors.json disagree: re-record"
    diffs = []
    for name, fn in invalid.CASES.items():
        got = invalid.outcome(fn)
        if got != stored[name]:
            diffs.append((f"invalid case {name!r} (tests/goldens/invalid.py)", stored[name], got))
    if diffs:
        _fail("invalid-call outcome(s)", diffs)
