"""Golden recorder for the lowering: off unless a recording sink is registered.

``_lower.lower_graph`` carries :func:`recording`. When the module ``sys.modules[SINK]`` exists (the
recording tool registers it: tests/goldens/site/sitecustomize.py, put on ``PYTHONPATH`` by
tests/goldens/record.py) and its ``path()`` names a file (it returns
``$HIPDNN_IREE_RECORD_GOLDENS``, read at each call), every top-level lowering appends one JSON line to
that file: the graph bytes, the target, every argument that changes the emitted text (policy, shape
spec, specialize) in a replayable form, and the sha256 of the MLIR text, or the error it raised.
``tests/goldens/record.py`` collects these lines into ``tests/goldens/lowerings.jsonl.xz``;
``tests/test_goldens.py`` replays them. NOTE: the lowering itself reads no environment variable
(tests/test_engine_configs.py::test_lowering_reads_no_environment); without the sink the wrapper
costs one dict lookup per call.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys

from lowering.abi import ENTRY_POINT

ENV = "HIPDNN_IREE_RECORD_GOLDENS"   # read by the sink, not here
SINK = "_hipdnn_iree_goldens_sink"


def _sink():
    return sys.modules.get(SINK)


def recording(fn):
    """Decorates ``lower_graph``; records only the outermost call (not ``@main_static``'s inner one)."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        sink = _sink()
        path = sink.path() if sink is not None else None
        if not path:
            return fn(*args, **kwargs)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        if a.get("_entry") != ENTRY_POINT or not a.get("_reflect", True):
            return fn(*args, **kwargs)
        try:
            out = fn(*args, **kwargs)
        except Exception as e:
            _append(sink, path, a, None, e)
            raise
        _append(sink, path, a, out.mlir, None)
        return out
    return wrapper


def _source() -> str:
    """Which layer asked for the lowering: ``cudnn`` / ``frontend`` where those are on the stack."""
    f, seen = sys._getframe(2), []
    while f is not None:
        seen.append(f.f_code.co_filename.replace(os.sep, "/"))
        f = f.f_back
    for layer in ("hipdnn_iree/cudnn/", "hipdnn_iree/frontend/", "hipdnn_iree/cli/", "hipdnn_iree/backend/",
                  "hipdnn_iree/plugins/"):
        if any(layer in s for s in seen):
            return layer.split("/")[1]
    return "lowering"


def _append(sink, path: str, a: dict, mlir: str | None, err: Exception | None) -> None:
    import base64
    import fcntl
    import hashlib
    import json
    from graph_ir.desc import encode_graph
    graph, gbytes = a["graph"], a.get("graph_bytes")
    rec = {"graph": None if gbytes is None else base64.b64encode(bytes(gbytes)).decode("ascii"), "desc": None}
    # NOTE: the GraphDesc lowered need not be the bytes' decoding (the engine passes both): where its
    # encoding differs from the bytes it is stored too, and replayed (no decode here: a recorded build
    # must decode its graph as often as an unrecorded one, tests/test_main_path_call_counts.py)
    try:
        enc = encode_graph(graph)
        if gbytes is None or enc != bytes(gbytes):
            rec["desc"] = base64.b64encode(enc).decode("ascii")
    except Exception as e:
        rec["desc_error"] = f"{type(e).__name__}: {e}"
    policy, spec = a.get("policy"), a.get("shape_spec")
    rec["target"] = a["target"]
    rec["policy"] = None if policy is None else policy.to_json()
    rec["shape_spec"] = None if spec is None else (spec if isinstance(spec, str) else spec.to_json())
    rec["shape_spec_text"] = isinstance(spec, str)
    rec["specialize"] = bool(a.get("specialize"))
    if err is None:
        rec["sha256"] = hashlib.sha256(mlir.encode("utf-8")).hexdigest()
    else:
        rec["error"] = {"type": type(err).__name__, "kind": getattr(err, "kind", None), "message": str(err)}
    rec["source"] = _source()
    rec["test"] = sink.test() if hasattr(sink, "test") else ""
    line = (json.dumps(rec, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
    finally:
        os.close(fd)
