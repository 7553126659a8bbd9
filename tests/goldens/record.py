"""Regenerates the goldens of tests/test_goldens.py (behaviour-preserving refactors check against them).

Command (from the repository root; the full test suite runs under it, about 10-15 minutes on 2 cores):

    .venv/bin/python tests/goldens/record.py

or, from a raw recording already made by hand (tests/goldens/site on PYTHONPATH registers the
recording sink in every process, lowering/_goldens.py; the variable names the file):

    PYTHONPATH=tests/goldens/site HIPDNN_IREE_RECORD_GOLDENS=<raw.jsonl> .venv/bin/python -m pytest tests
    .venv/bin/python tests/goldens/record.py --raw <raw.jsonl>

It writes, next to this file:

- ``lowerings.jsonl.xz``: every distinct lowering seen (lowering/_goldens.py records one JSON line per
  top-level ``lower_graph`` call while the sink is registered and ``HIPDNN_IREE_RECORD_GOLDENS`` names
  a file; the run uses an empty compile cache, whose hits would skip lowering): the run of the whole
  test suite (``tests/``, which runs every sample under ``samples/`` through tests/test_samples.py in
  subprocesses that inherit the variable), plus each builder of builders.py lowered for three targets
  (statically, and dynamically with ``graph_ir.dynamic.analyze``'s spec). Deduplicated by (graph
  bytes, lowered GraphDesc, target, policy, shape spec, specialize); each kept record is replayed
  here and keeps the recorded outcome that replay reproduces (records made under a test's
  monkeypatch of the lowering are dropped and reported).
- ``frontend.json``: builder name -> sha256 of the graph bytes its frontend encodes.
- ``errors.json``: invalid.py's case name -> [status name, message].
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import lzma
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ENV = "HIPDNN_IREE_RECORD_GOLDENS"
TARGETS = ("llvm-cpu:host", "rocm:gfx942", "cuda:sm_80")
KEY_FIELDS = ("graph", "desc", "target", "policy", "shape_spec", "shape_spec_text", "specialize")
OUTCOME_FIELDS = ("sha256", "error")


def key_of(rec: dict) -> str:
    return json.dumps([rec.get(k) for k in KEY_FIELDS], separators=(",", ":"))


SITE = os.path.join(HERE, "site")   # its sitecustomize registers the recording sink (lowering/_goldens.py)


def _register_sink() -> None:
    sys.path.insert(0, SITE)
    import sitecustomize  # noqa: F401  (this folder's: registers the sink in this process)
    from lowering._goldens import SINK
    assert SINK in sys.modules, "tests/goldens/site/sitecustomize.py did not register the sink"


def run_suite(raw: str) -> None:
    env = dict(os.environ, **{ENV: raw})
    env["PYTHONPATH"] = os.pathsep.join([SITE] + [p for p in [env.get("PYTHONPATH")] if p])
    with tempfile.TemporaryDirectory() as cache:
        env["HIPDNN_IREE_CACHE_DIR"] = cache   # NOTE: a compile-cache hit skips lowering: start empty
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                       cwd=REPO, env=env, check=False)


def record_builders(raw: str) -> dict:
    """Lowers every builder's bytes (recorded into ``raw``); returns name -> graph-bytes sha256."""
    sys.path.insert(0, HERE)
    import builders
    from lowering import lower
    from graph_ir import decode_graph
    from graph_ir.dynamic import analyze
    _register_sink()
    old = os.environ.get(ENV)
    os.environ[ENV] = raw
    shas = {}
    try:
        for name, fn in builders.BUILDERS.items():
            data = fn()
            shas[name] = hashlib.sha256(data).hexdigest()
            for target in TARGETS:
                for dynamic in (False, True):
                    try:
                        spec = analyze(decode_graph(data)) if dynamic else None
                        lower(data, target, verify=False, shape_spec=spec)
                    except Exception:  # noqa: BLE001 - the refusal is recorded as the golden
                        pass
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old
    return shas


def collect(raw: str) -> tuple[list, dict]:
    """Distinct lowerings of ``raw``, each with an outcome a clean re-lowering reproduces.

    NOTE: some tests monkeypatch the lowering (benchmarks/gpu_selfcheck.py (retired; in git history at commit 9e99c4b)'s no-workaround variant):
    their records are not this tree's behaviour. A key keeps the recorded outcome that replaying it
    here gives; a key none of whose outcomes replays is left out (counted as not_reproducible)."""
    sys.path.insert(0, HERE)
    from replay import replay
    by_key, outcomes, lines = {}, {}, 0
    with open(raw, encoding="utf-8") as f:
        for line in f:
            lines += 1
            rec = json.loads(line)
            k = key_of(rec)
            by_key.setdefault(k, rec)
            outcomes.setdefault(k, []).append({o: rec[o] for o in OUTCOME_FIELDS if o in rec})
    old = os.environ.pop(ENV, None)
    recs, dropped, multi = [], [], 0
    try:
        for k in sorted(by_key):
            got = replay(by_key[k])
            distinct = {json.dumps(o, sort_keys=True) for o in outcomes[k]}
            multi += len(distinct) > 1
            if got not in outcomes[k]:
                dropped.append(by_key[k]["test"])
                continue
            rec = {f: v for f, v in by_key[k].items() if f not in OUTCOME_FIELDS}
            recs.append({**rec, **got})
    finally:
        if old is not None:
            os.environ[ENV] = old
    return recs, {"raw_lines": lines, "keys_with_several_outcomes": multi, "not_reproducible": len(dropped),
                  "not_reproducible_from": sorted(set(dropped))}


def write_lowerings(recs: list) -> str:
    path = os.path.join(HERE, "lowerings.jsonl.xz")
    text = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in recs)
    with lzma.open(path, "wb", preset=9 | lzma.PRESET_EXTREME) as f:
        f.write(text.encode("utf-8"))
    return path


def record_errors() -> dict:
    sys.path.insert(0, HERE)
    import invalid
    return {name: invalid.outcome(fn) for name, fn in invalid.CASES.items()}


def summary(recs: list) -> dict:
    from graph_ir import decode_graph
    kinds, targets, sources, errors, policies, dynamic = set(), set(), {}, 0, set(), 0
    for r in recs:
        targets.add(r["target"])
        sources[r["source"]] = sources.get(r["source"], 0) + 1
        errors += "error" in r
        policies.add(r["policy"])
        dynamic += r["shape_spec"] is not None
        try:
            g = decode_graph(base64.b64decode(r["desc"] or r["graph"]))
            kinds.update(n.kind.name for n in g.nodes)
        except Exception:  # noqa: BLE001
            pass
    return {"lowerings": len(recs), "errors": errors, "dynamic": dynamic, "op_kinds": sorted(kinds),
            "targets": sorted(targets), "policies": len(policies), "sources": sources}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", help="a raw recording (HIPDNN_IREE_RECORD_GOLDENS output) instead of running the suite")
    args = ap.parse_args(argv)
    sys.path.insert(0, REPO)
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "raw.jsonl")
        if args.raw:
            with open(args.raw, "rb") as src, open(raw, "wb") as dst:
                dst.write(src.read())
        else:
            run_suite(raw)
        shas = record_builders(raw)
        recs, stats = collect(raw)
    path = write_lowerings(recs)
    with open(os.path.join(HERE, "frontend.json"), "w", encoding="utf-8") as f:
        json.dump(shas, f, indent=1, sort_keys=True)
        f.write("\n")
    errors = record_errors()
    with open(os.path.join(HERE, "errors.json"), "w", encoding="utf-8") as f:
        json.dump(errors, f, indent=1, sort_keys=True)
        f.write("\n")
    info = {**stats, **summary(recs), "frontend_graphs": len(shas), "invalid_cases": len(errors),
            "lowerings_xz_bytes": os.path.getsize(path)}
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
