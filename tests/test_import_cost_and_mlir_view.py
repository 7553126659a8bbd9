"""Defects a new user met: the import pulling in ml_dtypes, the cuDNN facade's unsupported-method
messages, and seeing the MLIR a graph lowers to (``graph_mlir`` and ``hipdnn-iree mlir``)."""
import textwrap

from harness import run_python


# -- `import hipdnn_iree` leaves ml_dtypes (0.6 s of a 0.85 s import) until a bf16 dtype is needed -----
def test_import_does_not_import_ml_dtypes():
    p = run_python("import hipdnn_iree, sys; print('ml_dtypes' in sys.modules)")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False", p.stdout + p.stderr


def test_a_bfloat16_graph_imports_ml_dtypes_when_it_needs_it_and_runs_right():
    """The library asks for the bf16 numpy dtype itself (before any device handle, whose IREE runtime
    imports ml_dtypes on its own: iree/runtime/dtypes.py), and then a bf16 matmul runs and matches
    float64 numpy."""
    p = run_python(textwrap.dedent("""
        import sys
        import numpy as np
        import hipdnn_iree as hd
        from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
        assert "ml_dtypes" not in sys.modules
        bf16 = numpy_dtype(int(hd.DataType.BFLOAT16))
        assert bf16.name == "bfloat16" and "ml_dtypes" in sys.modules
        g = hd.Graph(io_data_type=hd.DataType.BFLOAT16, compute_data_type=hd.DataType.FLOAT)
        a = g.tensor(name="A", uid=1, dim=[4, 8])
        b = g.tensor(name="B", uid=2, dim=[8, 3])
        g.matmul(a, b).set_output(True).set_uid(3)
        handle = hd.create_handle()
        g.build(handle)
        dt = {t.uid: numpy_dtype(int(t.data_type)) for t in g.get_compiled_plan_tensors()}
        assert dt == {1: bf16, 2: bf16, 3: bf16}, dt
        rng = np.random.default_rng(0)
        xa = rng.uniform(-1, 1, (4, 8)).astype(dt[1])
        xb = rng.uniform(-1, 1, (8, 3)).astype(dt[2])
        out = np.zeros((4, 3), dt[3])
        g.execute(handle, {1: xa, 2: xb, 3: out})
        want = xa.astype(np.float64) @ xb.astype(np.float64)
        err = float(np.abs(out.astype(np.float64) - want).max())
        assert err < 0.05, err
        print("ok", err)
    """))
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stdout + p.stderr


# -- graph_mlir: the MLIR a graph lowers to, as the IREE engine compiles it -----------------------------
def _matmul_graph():
    import hipdnn_iree as hd
    g = hd.Graph(name="mm", io_data_type=hd.DataType.FLOAT)
    a = g.tensor(name="A", uid=1, dim=[4, 8])
    b = g.tensor(name="B", uid=2, dim=[8, 2])
    g.matmul(a, b).set_output(True).set_uid(3)
    return g


def test_graph_mlir_of_a_matmul_is_the_module_a_build_compiles():
    import hipdnn_iree as hd
    from harness import filecheck
    from hipdnn_iree.frontend.mlir_view import graph_mlir
    g = _matmul_graph()
    text = graph_mlir(g)                       # validates the graph itself
    filecheck(text, "CHECK: func.func @main(%arg0: tensor<4x8xf32>, %arg1: tensor<8x2xf32>\n"
                    "CHECK: linalg.matmul\n")
    assert "llvm-cpu:host" in text
    g.build(hd.create_handle(cache=False))
    assert g.get_execution_plan().context.mlir == text   # the text the IREE engine compiled


def test_graph_mlir_for_a_gpu_target_is_that_targets_module():
    import hipdnn_iree as hd
    from hipdnn_iree.frontend.mlir_view import graph_mlir
    g = _matmul_graph()
    text = graph_mlir(g, target="rocm:gfx942")
    assert "func.func @main" in text and "linalg.matmul" in text and "rocm:gfx942" in text
    g.build(hd.create_handle(device=None, target="rocm:gfx942", cache=False))
    assert g.get_execution_plan().context.mlir == text


def test_graph_mlir_refuses_bad_input_with_a_status():
    import hipdnn_iree as hd
    from harness import raises
    from hipdnn_iree.frontend.mlir_view import graph_mlir
    S = hd.Status
    raises(S.BAD_PARAM, graph_mlir, b"not a graph", match="expected an hd.Graph, got bytes")
    raises(S.BAD_PARAM, graph_mlir, hd.Graph(name="empty"), match="has no operations")
    raises(S.NOT_SUPPORTED, graph_mlir, _matmul_graph(), "tpu:v1", match="unknown backend 'tpu'")
    raises(S.BAD_PARAM, graph_mlir, _matmul_graph(), ["llvm-cpu"], match="one target string")
    g = _matmul_graph()
    handle = hd.create_handle(cache=False)
    g.build(handle)
    restored = hd.Graph.from_compiled_plan(handle, g.serialize_compiled_plan())
    raises(S.NOT_SUPPORTED, graph_mlir, restored, match="restored from a compiled plan")


def test_graph_mlir_without_the_compiler_names_the_package():
    from harness import BLOCK_COMPILER
    p = run_python(BLOCK_COMPILER + textwrap.dedent("""
        import hipdnn_iree as hd
        from hipdnn_iree.frontend.mlir_view import graph_mlir
        g = hd.Graph(io_data_type=hd.DataType.FLOAT)
        g.matmul(g.tensor(name="A", uid=1, dim=[4, 8]), g.tensor(name="B", uid=2, dim=[8, 2])).set_output(True)
        try:
            graph_mlir(g)
        except hd.HipdnnError as e:
            print(e.status.name, e)
    """))
    assert p.returncode == 0 and p.stdout.startswith("NOT_SUPPORTED") and "iree-base-compiler" in p.stdout, \
        p.stdout + p.stderr
