"""Shared test helpers: random data, running one graph on both engines, FileCheck."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from textwrap import dedent as _dedent

import numpy as np

import hipdnn_iree as hd
from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
from tolerances import tolerance

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Prepend to code run with run_python(): makes `import iree.compiler` fail in that process.
BLOCK_COMPILER = _dedent("""
    import importlib.abc, sys
    class _NoCompiler(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "iree.compiler" or name.startswith("iree.compiler."):
                raise ImportError("iree.compiler is blocked in this process")
    sys.meta_path.insert(0, _NoCompiler())
""")



def raises(status, fn, *args, match=None):
    """Calls ``fn(*args)``; asserts it raises hd.HipdnnError with ``status`` (and ``match`` in the message)."""
    import pytest
    with pytest.raises(hd.HipdnnError) as ei:
        fn(*args)
    assert ei.value.status == status, str(ei.value)
    if match:
        assert match in str(ei.value), str(ei.value)
    return ei.value


def random_array(shape, data_type=hd.DataType.FLOAT, rng=None, low=-1.0, high=1.0, strides=None):
    """Fresh random data (never all zeros/ones) with optional element strides (a strided view)."""
    rng = rng if rng is not None else np.random.default_rng()
    dt = numpy_dtype(data_type)
    if dt == np.bool_:
        return rng.random(shape) > 0.5
    if strides is None:
        return rng.uniform(low, high, size=shape).astype(dt)
    from graph_ir.layout import physical_layout
    lay = physical_layout(shape, strides)
    phys = rng.uniform(low, high, size=lay.phys_shape).astype(dt)
    return np.lib.stride_tricks.as_strided(phys, shape=tuple(shape),
                                           strides=tuple(s * dt.itemsize for s in strides))


def empty_like_tensor(t: hd.TensorAttributes, fill=np.nan):
    """An output buffer matching the tensor's dims/strides, pre-filled with a sentinel."""
    dt = numpy_dtype(t.get_data_type())
    from graph_ir.layout import physical_layout
    dims, strides = t.get_dim(), t.get_stride()
    lay = physical_layout(dims, strides)
    phys = np.empty(lay.phys_shape, dt)
    phys[...] = False if dt == np.bool_ else (fill if np.issubdtype(dt, np.inexact) or dt.kind == "V" else -1)
    if dt.name.startswith(("float8_", "float4_")):   # NOTE: numpy's as_strided cannot rebuild ml_dtypes' 1-byte types
        v = np.lib.stride_tricks.as_strided(phys.view(np.uint8), shape=tuple(dims), strides=tuple(strides))
        return v.view(dt)
    return np.lib.stride_tricks.as_strided(phys, shape=tuple(dims), strides=tuple(s * dt.itemsize for s in strides))


def run_engines(build_graph, inputs: dict, handle, roundtrip: bool = True):
    """Builds ``build_graph()`` twice (IREE_LINALG and NUMPY_REFERENCE), runs both on ``inputs``.

    ``build_graph`` returns ``(graph, outputs)`` where ``outputs`` maps uid -> TensorAttributes.
    With ``roundtrip`` the IREE plan is serialized and restored into a fresh Graph first.
    Returns ``(iree_results, reference_results, iree_graph)``.
    """
    g, outs = build_graph()
    g.build(handle)
    assert g.get_execution_plan_engine_id() == hd.engine_id_from_name("IREE_LINALG")
    runner = hd.Graph.from_compiled_plan(handle, g.serialize_compiled_plan()) if roundtrip else g
    got = {u: empty_like_tensor(t) for u, t in outs.items()}
    runner.execute(handle, {**inputs, **got})
    r, routs = build_graph()
    r.set_preferred_engine_id_ext("NUMPY_REFERENCE")
    r.build(handle)
    want = {u: empty_like_tensor(t) for u, t in routs.items()}
    r.execute(handle, {**inputs, **want})
    return got, want, g


def assert_close(got, want, data_type, scale=1.0, what=""):
    rtol, atol = tolerance(data_type)
    g = np.asarray(got).astype(np.float64) if np.asarray(got).dtype != np.bool_ else np.asarray(got)
    w = np.asarray(want).astype(np.float64) if np.asarray(want).dtype != np.bool_ else np.asarray(want)
    if g.dtype == np.bool_:
        assert np.array_equal(g, w), f"{what}: boolean results differ at {np.argwhere(g != w)[:5].tolist()}"
        return
    np.testing.assert_allclose(g, w, rtol=rtol * scale, atol=atol * scale, err_msg=what)


def compare_engines(build_graph, inputs, handle, roundtrip=True, scale=1.0):
    got, want, g = run_engines(build_graph, inputs, handle, roundtrip)
    for u in got:
        t = next(t for t in g._tensors if t.get_uid() == u)
        assert_close(got[u], want[u], t.get_data_type(), scale, what=f"uid {u} ('{t.get_name()}')")
    return got, want, g


def filecheck(text: str, checks: str) -> None:
    """Runs FileCheck (the ``filecheck`` package) with ``checks`` over ``text``."""
    import sysconfig
    # NOTE: the pinned filecheck beside this interpreter first (a venv's tools are not on PATH unless it is activated)
    exe = (shutil.which("filecheck", path=os.pathsep.join((sysconfig.get_path("scripts"), os.path.dirname(sys.executable))))
           or shutil.which("filecheck"))
    assert exe, f"filecheck is not installed beside {sys.executable}: pip install '.[test]'"
    with tempfile.NamedTemporaryFile("w", suffix=".check", delete=False) as f:
        f.write(checks)
        path = f.name
    try:
        p = subprocess.run([exe, path], input=text, capture_output=True, text=True)
    finally:
        os.unlink(path)
    assert p.returncode == 0, f"FileCheck failed:\n{p.stdout}{p.stderr}\n--- input ---\n{text}"


def lowered_mlir(g: hd.Graph, handle, target="llvm-cpu:host", **policy_changes) -> str:
    """The linalg MLIR the IREE engine emits for graph ``g`` (``policy_changes``: fields of the target's
    default lowering policy changed)."""
    from lowering import lower
    from lowering.policy import LoweringPolicy
    g.build_operation_graph(handle)
    policy = LoweringPolicy.for_target(target).with_(**policy_changes) if policy_changes else None
    return lower(g.get_op_graph_bytes(), target=target, policy=policy).mlir


def run_python(code: str, env_extra=None, timeout=300) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh Python process (cwd = repo root); returns the completed process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)
