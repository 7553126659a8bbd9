"""build_plans(ALL) and autotune: a config that fails to build is dropped from the plan list with
its reason (as cuDNN drops an engine config that fails to finalize); ALL fails only when no
config builds, with NOT_SUPPORTED naming each reason; a GPU handle never falls back to the host
reference engine; the engine configs of f16/bf16 convs compile for several x86 CPU targets
(compile-only), among them the im2col form that IREE 3.13 could not compile for f16 operands
with an f32 accumulator."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.plugin_sdk.engine_ids import engine_id_from_name
from hipdnn_iree.plugins.iree_linalg import IreeLinalgPlugin
from hipdnn_iree.plugins.numpy_reference.plugin import NumpyReferencePlugin
from harness import random_array, raises


def _conv_graph(dtype=hd.DataType.HALF, name="conv"):
    g = hd.Graph(name=name, io_data_type=dtype, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[2, 8, 16, 16], stride=[2048, 1, 128, 8])
    w = g.tensor(name="w", uid=2, dim=[16, 8, 3, 3], stride=[72, 1, 24, 8])
    g.conv_fprop(x, w, padding=[1, 1]).set_output(True).set_uid(3)
    return g


class _FailingEngine:
    """A real second engine plugin whose builds always fail (an engine config that cannot be
    finalized): what build_plans(ALL) must drop, not fail on."""

    name, version = "failing_engine", "1"
    ENGINE = engine_id_from_name("ALWAYS_FAILS")
    engine_names = {ENGINE: "ALWAYS_FAILS"}

    def get_all_engine_ids(self):
        return [self.ENGINE]

    def get_applicable_engine_ids(self, op_graph):
        return [self.ENGINE]

    def get_workspace_size(self, engine_id, op_graph):
        return 0

    def create_execution_context(self, engine_id, op_graph, engine_config=None):
        raise hd.HipdnnError(hd.Status.INTERNAL_ERROR, "ALWAYS_FAILS cannot finalize this config")

    def destroy_execution_context(self, ctx):
        pass

    def execute_op_graph(self, ctx, variant_pack, workspace=None):
        raise AssertionError("never built")


def _ranked(g, h):
    g.validate()
    g.build_operation_graph(h)
    g.create_execution_plans([hd.HeurMode.A])
    g.check_support()
    return g


def test_a_config_that_fails_to_build_is_dropped_with_its_reason(rng):
    h = hd.create_handle(engine_plugins=[IreeLinalgPlugin(), _FailingEngine(), NumpyReferencePlugin()])
    g = _ranked(_conv_graph(), h)
    names = [g.get_engine_config_at_index(i).engine_name for i in range(g.get_execution_plan_count())]
    assert "ALWAYS_FAILS" in names
    with pytest.warns(RuntimeWarning, match="ALWAYS_FAILS cannot finalize"):
        g.build_plans(hd.BuildPlanPolicy.ALL)
    left = [g.get_engine_config_at_index(i).engine_name for i in range(g.get_execution_plan_count())]
    assert "ALWAYS_FAILS" not in left and left[0] == "IREE_LINALG", left
    (cfg, err), = g.get_dropped_engine_configs()
    assert cfg.engine_name == "ALWAYS_FAILS" and err.status == hd.Status.INTERNAL_ERROR
    x = random_array([2, 8, 16, 16], hd.DataType.HALF, rng, strides=[2048, 1, 128, 8])
    w = random_array([16, 8, 3, 3], hd.DataType.HALF, rng, strides=[72, 1, 24, 8])
    outs = []
    for i in range(g.get_execution_plan_count()):
        y = np.lib.stride_tricks.as_strided(np.full((2, 16, 16, 16), np.nan, np.float16), (2, 16, 16, 16),
                                            (8192, 2, 512, 32))
        g.execute_plan_at_index(h, {1: x, 2: w, 3: y}, index=i)
        outs.append(np.array(y, np.float64))
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=2e-2, atol=2e-2)


def test_all_fails_only_when_no_config_builds_naming_each_reason():
    h = hd.create_handle(engine_plugins=[_FailingEngine()])
    g = _ranked(_conv_graph(), h)
    e = raises(hd.Status.NOT_SUPPORTED, g.build_plans, hd.BuildPlanPolicy.ALL)
    assert "ALWAYS_FAILS cannot finalize" in str(e) and "no engine config built" in str(e), str(e)


def test_autotune_with_no_config_built_is_not_supported_not_an_index_error(rng):
    h = hd.create_handle(engine_plugins=[_FailingEngine(), NumpyReferencePlugin()])
    g = _ranked(_conv_graph(hd.DataType.FLOAT), h)
    x = random_array([2, 8, 16, 16], hd.DataType.FLOAT, rng, strides=[2048, 1, 128, 8])
    w = random_array([16, 8, 3, 3], hd.DataType.FLOAT, rng, strides=[72, 1, 24, 8])
    y = np.zeros((2, 16, 16, 16), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        raises(hd.Status.NOT_SUPPORTED, g.autotune, h, {1: x, 2: w, 3: y}, match="no engine config built")


def test_a_gpu_handle_never_ranks_the_host_reference_engine():
    """Compile-only handles keep the reference (it runs on the host); a device handle other than
    the CPU lists it only when it is the preferred engine."""
    from hipdnn_iree.backend.engines import PluginResourceManager
    from hipdnn_iree.plugin_sdk.contract import SessionSettings
    g = _conv_graph(hd.DataType.FLOAT)
    g.validate()
    h = hd.create_handle()
    g.build_operation_graph(h)
    op = g.get_op_graph_bytes()
    ref = engine_id_from_name("NUMPY_REFERENCE")
    rm = PluginResourceManager([NumpyReferencePlugin()], SessionSettings(device="cuda"))
    assert rm.applicable_engines(op) == []
    assert rm.applicable_engines(op, preferred=ref) == [ref]
    cpu = PluginResourceManager([NumpyReferencePlugin()], SessionSettings(device="local-task"))
    assert cpu.applicable_engines(op) == [ref]


# ---------------------------------------------------------------------------------------------------
# every config of the f16/bf16 conv compiles for several x86 CPUs (compile-only handles)
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64-v4", "znver4", "generic"])
def test_conv_engine_configs_compile_for_cpu_targets(cpu):
    h = hd.create_handle(device=None, target=f"llvm-cpu:{cpu}", cache=False)
    for dtype in (hd.DataType.HALF, hd.DataType.BFLOAT16):
        g = _conv_graph(dtype, name=f"conv_{cpu}_{dtype.name}")
        g.validate()
        g.build_operation_graph(h)
        g.create_execution_plans([hd.HeurMode.A, hd.HeurMode.B])
        g.check_support()
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)      # a dropped config fails the test
            g.build_plans(hd.BuildPlanPolicy.ALL)
        knobs = [g.get_engine_config_at_index(i).knobs for i in range(g.get_execution_plan_count())]
        assert {"IM2COL": "ON"} in knobs, knobs
        assert g.get_dropped_engine_configs() == []


def test_im2col_f16_conv_runs_right_on_this_cpu(rng):
    """The form that failed to compile (IREE's im2col of an f16 conv with an f32 accumulator) runs
    and matches the reference engine."""
    h = hd.create_handle()
    results = []
    x = random_array([2, 8, 16, 16], hd.DataType.HALF, rng, strides=[2048, 1, 128, 8])
    w = random_array([16, 8, 3, 3], hd.DataType.HALF, rng, strides=[72, 1, 24, 8])
    for engine, knobs in (("IREE_LINALG", {"IM2COL": "ON"}), ("NUMPY_REFERENCE", None)):
        g = _conv_graph()
        g.validate()
        g.build_operation_graph(h)
        g.create_execution_plan(engine, knobs)
        g.check_support()
        g.build_plans()
        y = np.full((2, 16, 16, 16), np.nan, np.float16)
        g.execute(h, {1: x, 2: w, 3: y})
        results.append(y.astype(np.float64))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-2, atol=1e-2)
