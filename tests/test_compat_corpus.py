"""Frozen plan files from every envelope version load and run, in a fresh process.

The files under tests/data/ are never regenerated: tests/data/make_corpus.py refuses to overwrite
them. A new format version adds a new file next to the old ones.
"""
import glob
import os
import textwrap

import pytest

from harness import REPO, run_python

CORPUS = sorted(glob.glob(os.path.join(REPO, "tests", "data", "*.plan")))


def test_corpus_has_every_envelope_version():
    from hipdnn_iree.backend import envelope as _envelope
    versions = {_envelope.decode(open(p, "rb").read()).version for p in CORPUS}
    assert versions >= set(_envelope.SUPPORTED_VERSIONS), versions


def test_corpus_has_every_payload_format():
    """FUSPLAN 1.0 (hipdnn-iree 0.1, in envelopes v1 and v2), 1.1 kind 2 and 1.1 kind 3."""
    from hipdnn_iree.backend import envelope as _envelope
    from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
    found = set()
    for p in CORPUS:
        fp = _fusplan.unpack(_envelope.decode(open(p, "rb").read()).plugin_payload)
        found.add((fp.format_minor, fp.payload_kind))
    assert found >= {(0, 2), (1, 2), (1, 3)}, found


@pytest.mark.parametrize("plan", CORPUS, ids=os.path.basename)
def test_corpus_plan_runs_in_fresh_process(plan):
    data = plan[:-len(".plan")] + ".npz"
    p = run_python(textwrap.dedent(f"""
        import numpy as np, hipdnn_iree as hd
        h = hd.create_handle()
        r = hd.Graph.from_compiled_plan(h, hd.load_plan({plan!r}))
        r2 = hd.Graph.from_compiled_plan_file(h, {plan!r})
        d = np.load({data!r})
        tensors = {{t.uid: t for t in r.get_compiled_plan_tensors()}}
        assert sorted(tensors) == r.get_compiled_plan_tensor_uids() == [1, 2, 3, 4]
        assert tensors[4].role == "output" and tensors[4].dims == (2, 6, 12)
        assert tensors[2].strides == (192, 1, 16)
        y = np.full((2, 6, 12), np.nan, np.float32)
        r.execute(h, {{1: d["x"], 2: d["w_memory"].transpose(0, 2, 1), 3: d["b"], 4: y}})
        np.testing.assert_allclose(y, d["y"], rtol=1e-4, atol=1e-4)
        y2 = np.full((2, 6, 12), np.nan, np.float32)
        r2.execute(h, {{1: d["x"], 2: d["w_memory"].transpose(0, 2, 1), 3: d["b"], 4: y2}})
        np.testing.assert_allclose(y2, d["y"], rtol=1e-4, atol=1e-4)
        print("CORPUS_OK", hd.__version__)
    """))
    assert p.returncode == 0 and "CORPUS_OK" in p.stdout, p.stdout + p.stderr
