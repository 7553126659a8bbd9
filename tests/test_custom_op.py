"""CUSTOM_OP (hipDNN's custom op node): a user-registered MLIR function inlined into the graph's
module. The text and the callable forms against numpy (and the registered reference on the
NUMPY_REFERENCE engine), with other ops before and after, a plan restored and run in another process
that registers nothing (and cannot compile), the compile cache keyed on the function, and the
refusals: unknown ids, ill-formed ids, signatures that are not the node's, outputs without dims."""
import json
import os
import struct
import textwrap

import numpy as np
import pytest

import hipdnn_iree as hd
from graph_ir import custom_ops
from harness import BLOCK_COMPILER, assert_close, compare_engines, empty_like_tensor, raises, random_array, run_python

F, H = hd.DataType.FLOAT, hd.DataType.HALF
S = hd.Status
ELEM = {hd.DataType.FLOAT: "f32", hd.DataType.HALF: "f16", hd.DataType.BFLOAT16: "bf16"}


@pytest.fixture(autouse=True)
def _registry():
    """Each test starts with no registrations and leaves none behind."""
    saved = dict(custom_ops.REGISTRY)
    custom_ops.REGISTRY.clear()
    yield
    custom_ops.REGISTRY.clear()
    custom_ops.REGISTRY.update(saved)


def _ttype(dims, elem):
    return f"tensor<{''.join(f'{d}x' for d in dims)}{elem}>"


def _scale_add(dims=(4, 8), elem="f32", factor="2.0", name="scale_add"):
    """``x * factor + y`` as one linalg.generic, for tensors of ``dims``."""
    t = _ttype(dims, elem)
    ds = ", ".join(f"d{i}" for i in range(len(dims)))
    m = f"affine_map<({ds}) -> ({ds})>"
    par = ", ".join(['"parallel"'] * len(dims))
    return textwrap.dedent(f"""\
        func.func @{name}(%x: {t}, %y: {t}) -> {t} {{
          %e = tensor.empty() : {t}
          %r = linalg.generic {{indexing_maps = [{m}, {m}, {m}], iterator_types = [{par}]}}
              ins(%x, %y : {t}, {t}) outs(%e : {t}) {{
          ^bb0(%a: {elem}, %b: {elem}, %o: {elem}):
            %c = arith.constant {factor} : {elem}
            %m = arith.mulf %a, %c : {elem}
            %s = arith.addf %m, %b : {elem}
            linalg.yield %s : {elem}
          }} -> {t}
          return %r : {t}
        }}
        """)


# Two results of different shapes: x * y and the row sums of x. In a module, with comments.
PROD_AND_ROWSUM = """
// the product of the inputs and the row sums of the first
module {
  func.func public @prod_rowsum(%x: tensor<4x8xf32>, %y: tensor<4x8xf32> {some.arg_attr = 1 : i32})
      -> (tensor<4x8xf32>, tensor<4xf32>) {
    %e = tensor.empty() : tensor<4x8xf32>
    %p = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>,
                                          affine_map<(d0, d1) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel"]}
        ins(%x, %y : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %m = arith.mulf %a, %b : f32
      linalg.yield %m : f32
    } -> tensor<4x8xf32>
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<4xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4xf32>) -> tensor<4xf32>
    %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                         iterator_types = ["parallel", "reduction"]}
        ins(%x : tensor<4x8xf32>) outs(%acc : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):   // "a string in a comment: } {"
      %r = arith.addf %a, %o : f32
      linalg.yield %r : f32
    } -> tensor<4xf32>
    return %p, %s : tensor<4x8xf32>, tensor<4xf32>
  }
}
"""


def _axpy_mlir(inputs, outputs, data):
    """The callable form: ``alpha * x + y`` for any shape and float type, alpha from the node's bytes."""
    (alpha,) = struct.unpack("<f", data)
    (dims, dt), (dims_y, dt_y) = inputs
    assert (dims, dt) == (dims_y, dt_y) and outputs == [(dims, dt)] and isinstance(dt, hd.DataType)
    return _scale_add(dims, ELEM[dt], repr(alpha), name="axpy")


def _axpy_reference(inputs, data):
    (alpha,) = struct.unpack("<f", data)
    x, y = (a.astype(np.float64) for a in inputs)
    return [alpha * x + y]


def _two_inputs(dims=(4, 8), dt=F):
    g = hd.Graph(name="custom", io_data_type=dt)
    return g, g.tensor(name="x", uid=1, dim=list(dims)), g.tensor(name="y", uid=2, dim=list(dims))


def _run(g, handle, inputs, outs):
    got = {u: empty_like_tensor(t) for u, t in outs.items()}
    g.execute(handle, {**inputs, **got})
    return got


# -- numerics ------------------------------------------------------------------------------------
def test_text_function_against_numpy_and_the_reference(cpu, rng):
    hd.register_custom_op("demo.scale_add", _scale_add(), reference=lambda ins, data: [ins[0] * 2 + ins[1]])
    assert hd.registered_custom_ops() == ["demo.scale_add"]

    def build():
        g, x, y = _two_inputs()
        (z,) = g.custom_op("demo.scale_add", [x, y], [([4, 8], F)], name="sa")
        return g, {3: z.set_output(True).set_uid(3)}

    inputs = {1: random_array((4, 8), F, rng), 2: random_array((4, 8), F, rng)}
    got, want, g = compare_engines(build, inputs, cpu)     # IREE (through a restored plan) vs the reference
    np.testing.assert_allclose(got[3], inputs[1] * 2 + inputs[2], rtol=1e-6, atol=1e-6)
    mlir = g.get_mlir()
    assert "func.func private @custom_0_demo_scale_add(" in mlir and "func.call @custom_0_demo_scale_add(" in mlir


def test_two_results_of_different_shapes(cpu, rng):
    hd.register_custom_op("demo.prod_rowsum", PROD_AND_ROWSUM,
                          reference=lambda ins, data: [ins[0] * ins[1], ins[0].sum(axis=1)])
    g, x, y = _two_inputs()
    p, s = g.custom_op("demo.prod_rowsum", [x, y], [([4, 8], F), {"dims": [4], "data_type": F, "name": "rowsum"}])
    assert s.get_name() == "rowsum" and s.get_dim() == [4] and p.get_data_type() == F
    p.set_output(True).set_uid(3)
    s.set_output(True).set_uid(4)
    g.build(cpu)
    a, b = random_array((4, 8), F, rng), random_array((4, 8), F, rng)
    got = _run(g, cpu, {1: a, 2: b}, {3: p, 4: s})
    np.testing.assert_allclose(got[3], a * b, rtol=1e-6)
    np.testing.assert_allclose(got[4], a.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dims,dt,alpha", [((3, 5), F, 0.75), ((2, 3, 4), H, -1.5)], ids=["f32_3x5", "f16_2x3x4"])
def test_callable_form_writes_the_function_for_the_nodes_shape(cpu, rng, dims, dt, alpha):
    hd.register_custom_op("demo.axpy", _axpy_mlir, reference=_axpy_reference)

    def build():
        g, x, y = _two_inputs(dims, dt)
        (z,) = g.custom_op("demo.axpy", [x, y], [(list(dims), dt)], data=struct.pack("<f", alpha))
        return g, {3: z.set_output(True).set_uid(3)}

    inputs = {1: random_array(dims, dt, rng), 2: random_array(dims, dt, rng)}
    got, want, _ = compare_engines(build, inputs, cpu)
    assert_close(got[3], alpha * inputs[1].astype(np.float64) + inputs[2], dt)


def _pipeline():
    """matmul -> custom op (x * 2 + bias) -> relu; the custom op's input and output are virtual."""
    g = hd.Graph(name="mm_custom_relu", io_data_type=F, intermediate_data_type=F)
    a = g.tensor(name="A", uid=1, dim=[4, 6])
    b = g.tensor(name="B", uid=2, dim=[6, 8])
    bias = g.tensor(name="bias", uid=3, dim=[4, 8])
    c = g.matmul(a, b)
    (z,) = g.custom_op("demo.scale_add", [c, bias], [([4, 8], F)])
    y = g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(4)
    return g, {4: y}


def _pipeline_want(a, b, bias):
    return np.maximum(a.astype(np.float64) @ b * 2 + bias, 0)


def test_inside_a_graph_with_ops_before_and_after(cpu, rng):
    hd.register_custom_op("demo.scale_add", _scale_add(), reference=lambda ins, data: [ins[0] * 2 + ins[1]])
    inputs = {1: random_array((4, 6), F, rng), 2: random_array((6, 8), F, rng), 3: random_array((4, 8), F, rng)}
    got, want, _ = compare_engines(_pipeline, inputs, cpu)
    np.testing.assert_allclose(got[4], _pipeline_want(*inputs.values()), rtol=1e-5, atol=1e-5)


def test_plan_restores_and_runs_in_a_process_that_never_registered_the_op(cpu, rng, tmp_path):
    hd.register_custom_op("demo.scale_add", _scale_add())
    g, outs = _pipeline()
    g.build(cpu)
    path = str(tmp_path / "custom.plan")
    hd.save_plan(path, g.serialize_compiled_plan())
    inputs = {1: random_array((4, 6), F, rng), 2: random_array((6, 8), F, rng), 3: random_array((4, 8), F, rng)}
    np.savez(tmp_path / "inputs.npz", **{f"u{u}": v for u, v in inputs.items()})
    code = BLOCK_COMPILER + textwrap.dedent(f"""
        import json, numpy as np, hipdnn_iree as hd
        h = hd.create_handle()
        r = hd.Graph.from_compiled_plan(h, hd.load_plan({path!r}))
        d = np.load({str(tmp_path / "inputs.npz")!r})
        y = np.full((4, 8), np.nan, np.float32)
        r.execute(h, {{1: d["u1"], 2: d["u2"], 3: d["u3"], 4: y}})
        np.save({str(tmp_path / "y.npy")!r}, y)
        print(json.dumps({{"registered": hd.registered_custom_ops()}}))
    """)
    p = run_python(code)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"registered": []}
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(y, _pipeline_want(*inputs.values()), rtol=1e-5, atol=1e-5)
    here = _run(hd.Graph.from_compiled_plan(cpu, hd.load_plan(path)), cpu, inputs, outs)
    np.testing.assert_array_equal(y, here[4])


def test_the_compile_cache_key_covers_the_function(cpu, rng):
    """The module's text (the cache key) holds the function: a new registration gives a new module."""
    a, b = random_array((4, 8), F, rng), random_array((4, 8), F, rng)
    for factor in (2.0, 3.0):
        hd.register_custom_op("demo.scale_add", _scale_add(factor=repr(factor)))
        g, x, y = _two_inputs()
        (z,) = g.custom_op("demo.scale_add", [x, y], [([4, 8], F)])
        z.set_output(True).set_uid(3)
        g.build(cpu)
        np.testing.assert_allclose(_run(g, cpu, {1: a, 2: b}, {3: z})[3], a * factor + b, rtol=1e-6, atol=1e-6)


def test_one_function_serves_every_node_of_the_op(cpu, rng):
    hd.register_custom_op("demo.scale_add", _scale_add())
    g, x, y = _two_inputs()
    (z,) = g.custom_op("demo.scale_add", [x, y], [([4, 8], F)])
    (w,) = g.custom_op("demo.scale_add", [z, x], [([4, 8], F)])
    w.set_output(True).set_uid(3)
    assert g.get_mlir().count("func.func private") == 1
    g.build(cpu)
    a, b = random_array((4, 8), F, rng), random_array((4, 8), F, rng)
    np.testing.assert_allclose(_run(g, cpu, {1: a, 2: b}, {3: w})[3], (a * 2 + b) * 2 + a, rtol=1e-5, atol=1e-6)


def test_the_graph_round_trips_through_json_and_hipdnn_bytes(cpu, rng):
    hd.register_custom_op("demo.axpy", _axpy_mlir)
    g, x, y = _two_inputs((3, 5))
    (z,) = g.custom_op("demo.axpy", [x, y], [([3, 5], F)], data=struct.pack("<f", 0.5))
    z.set_output(True).set_uid(3)
    doc = json.loads(g.to_json())
    node = doc["nodes"][0]
    assert node["op"] == "CUSTOM_OP" and node["attrs"]["custom_op_id"] == "demo.axpy"
    assert node["attrs"]["input_uids"] == [1, 2] and node["attrs"]["output_uids"] == [3]
    assert hd.Graph.from_json(doc).to_hipdnn_graph() == g.to_hipdnn_graph()
    r = hd.Graph.from_hipdnn_graph(g.to_hipdnn_graph())
    r.build(cpu)
    a, b = random_array((3, 5), F, rng), random_array((3, 5), F, rng)
    out = np.empty((3, 5), np.float32)
    r.execute(cpu, {1: a, 2: b, 3: out})
    np.testing.assert_allclose(out, 0.5 * a + b, rtol=1e-6, atol=1e-6)


def test_dims_of_a_custom_op_stay_fixed_under_dynamic_shapes(cpu, rng):
    """A dynamic build: the custom op's tensors keep their dims; the other ops' batch still varies,
    and the specialized static entry holds its own copy of the function."""
    hd.register_custom_op("demo.scale_add", _scale_add())
    g = hd.Graph(name="dyn", io_data_type=F)
    x = g.tensor(name="x", uid=1, dim=[4, 8])
    y = g.tensor(name="y", uid=2, dim=[4, 8])
    v = g.tensor(name="v", uid=3, dim=[6, 8])
    (z,) = g.custom_op("demo.scale_add", [x, y], [([4, 8], F)])
    z.set_output(True).set_uid(4)
    g.pointwise(v, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(5)
    g.set_override_shape_enabled(True)
    g.build(cpu)
    spec = g._shape_spec
    assert spec.dims[1] == (4, 8) and spec.dims[4] == (4, 8) and isinstance(spec.dims[3][0], str)
    mlir = g.get_execution_plan().context.mlir
    assert "func.func private @custom_0_demo_scale_add(" in mlir
    assert "func.func private @main_static_custom_0_demo_scale_add(" in mlir
    a, b, c = (random_array(s, F, rng) for s in ((4, 8), (4, 8), (3, 8)))
    out4, out5 = np.empty((4, 8), np.float32), np.empty((3, 8), np.float32)
    g.execute(cpu, {1: a, 2: b, 3: c, 4: out4, 5: out5})
    np.testing.assert_allclose(out4, a * 2 + b, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out5, np.maximum(c, 0))


# -- refusals --------------------------------------------------------------------------------
def test_an_unknown_id_is_not_supported_naming_it(cpu):
    g, x, y = _two_inputs()
    (z,) = g.custom_op("nobody.nothing", [x, y], [([4, 8], F)])
    z.set_output(True).set_uid(3)
    e = raises(S.NOT_SUPPORTED, g.build, cpu, match="'nobody.nothing'")
    assert "CUSTOM_OP" in str(e)
    from lowering import lower
    from graph_ir import GraphError
    with pytest.raises(GraphError, match="nobody.nothing") as ei:
        lower(g.to_hipdnn_graph(), verify=False)
    assert ei.value.kind == "unsupported"


@pytest.mark.parametrize("op_id", ["noplugin", "a..b", ".op", "plugin.", "plug in.op", "p.o/p", "", 7, "x." + "y" * 300],
                         ids=["no_dot", "empty_name", "leading_dot", "trailing_dot", "space", "slash", "empty", "int",
                              "too_long"])
def test_an_ill_formed_id_is_bad_param(op_id):
    raises(S.BAD_PARAM, hd.register_custom_op, op_id, _scale_add(), match="<plugin>.<op>")
    g, x, y = _two_inputs()
    raises(S.BAD_PARAM, g.custom_op, op_id, [x, y], [([4, 8], F)], match="<plugin>.<op>")
    assert hd.registered_custom_ops() == []


def test_a_signature_that_is_not_the_nodes_is_bad_param(cpu):
    hd.register_custom_op("demo.scale_add", _scale_add((4, 8)))
    g, x, y = _two_inputs((4, 6))
    (z,) = g.custom_op("demo.scale_add", [x, y], [([4, 6], F)])
    z.set_output(True).set_uid(3)
    e = raises(S.BAD_PARAM, g.build, cpu, match="argument 0 of its function @scale_add")
    assert "tensor<4x8xf32>" in str(e) and "tensor<4x6xf32>" in str(e) and "demo.scale_add" in str(e)
    hd.register_custom_op("demo.scale_add", _scale_add((4, 6), "f16"))
    raises(S.BAD_PARAM, g.build, cpu, match="tensor<4x6xf16>")
    hd.register_custom_op("demo.prod_rowsum", PROD_AND_ROWSUM)
    g, x, y = _two_inputs()
    (p,) = g.custom_op("demo.prod_rowsum", [x, y], [([4, 8], F)])
    p.set_output(True).set_uid(3)
    raises(S.BAD_PARAM, g.build, cpu, match="has 2 result(s), the node has 1 output(s)")


def test_outputs_without_dims_are_bad_param():
    g, x, y = _two_inputs()
    (z,) = g.custom_op("demo.scale_add", [x, y], [(None, F)])
    z.set_output(True).set_uid(3)
    raises(S.BAD_PARAM, g.validate, match="output 0 (uid 3) has no dims")
    g, x, y = _two_inputs()
    (z,) = g.custom_op("demo.scale_add", [x, y], [{"data_type": F}])
    z.set_dim([4, 8]).set_output(True).set_uid(3)          # dims set later do
    g.validate()


def test_bad_arguments_are_bad_param():
    g, x, y = _two_inputs()
    raises(S.BAD_PARAM, g.custom_op, "demo.op", x, [([4, 8], F)], match="inputs must be a list")
    raises(S.BAD_PARAM, g.custom_op, "demo.op", [x, "y"], [([4, 8], F)], match="inputs[1]")
    raises(S.BAD_PARAM, g.custom_op, "demo.op", [x], [], match="non-empty list")
    raises(S.BAD_PARAM, g.custom_op, "demo.op", [x], [F], match="outputs[0]")
    raises(S.BAD_PARAM, g.custom_op, "demo.op", [x], [{"dim": [4, 8]}], match="unknown key(s) ['dim']")
    raises(S.BAD_PARAM, lambda: g.custom_op("demo.op", [x], [([4, 8], F)], data="text"), match="data must be bytes")
    raises(S.BAD_PARAM, g.custom_op, "demo.op", [x], [([4, 8], "float")], match="data_type")
    other = hd.Graph().tensor(name="o", dim=[4, 8])
    raises(S.BAD_PARAM, g.custom_op, "demo.op", [other], [([4, 8], F)], match="another graph")


@pytest.mark.parametrize("text,match", [
    (_scale_add() + _scale_add(name="again"), "holds 2 func.func"),
    ("#map = affine_map<(d0) -> (d0)>\n" + _scale_add(), "holds more than the function"),
    ("func.func private @decl(%x: tensor<4xf32>) -> tensor<4xf32>\n", "has no body"),
    ("module {}", "holds 0 func.func"),
    ("func.func @f(%x: tensor<4xf32> -> tensor<4xf32> { }", "unbalanced"),
], ids=["two_functions", "alias", "declaration", "empty_module", "unbalanced"])
def test_text_that_is_not_one_function_is_refused_at_registration(text, match):
    raises(S.BAD_PARAM, hd.register_custom_op, "demo.bad", text, match=match)
    assert hd.registered_custom_ops() == []


def test_registration_arguments_of_the_wrong_kind_are_bad_param():
    raises(S.BAD_PARAM, hd.register_custom_op, "demo.bad", 42, match="must be MLIR text")
    raises(S.BAD_PARAM, hd.register_custom_op, "demo.bad", _scale_add(), "no", match="reference must be a callable")
    assert hd.registered_custom_ops() == []


def test_a_function_that_does_not_verify_names_the_custom_op(cpu):
    wrong = _scale_add().replace("%s = arith.addf %m, %b : f32", "%s = arith.addf %m, %b : f16")
    hd.register_custom_op("demo.scale_add", wrong)
    g, x, y = _two_inputs()
    (z,) = g.custom_op("demo.scale_add", [x, y], [([4, 8], F)], name="broken")
    z.set_output(True).set_uid(3)
    e = raises(S.BAD_PARAM, g.build, cpu, match="custom_op 'broken' ('demo.scale_add'): its registered MLIR function")
    assert "arith.addf %m, %b : f16" in str(e)


def test_a_callable_that_fails_is_bad_param(cpu):
    def boom(inputs, outputs, data):
        raise ValueError("no such shape")

    for fn, match in ((boom, "raised ValueError: no such shape"), (lambda i, o, d: 3, "returned int"),
                      (lambda i, o, d: "module {}", "holds 0 func.func")):
        hd.register_custom_op("demo.fn", fn)
        g, x, y = _two_inputs()
        (z,) = g.custom_op("demo.fn", [x, y], [([4, 8], F)])
        z.set_output(True).set_uid(3)
        raises(S.BAD_PARAM, g.build, cpu, match=match)


def test_the_reference_engine_needs_a_reference(cpu, rng):
    hd.register_custom_op("demo.scale_add", _scale_add())
    g, x, y = _two_inputs()
    (z,) = g.custom_op("demo.scale_add", [x, y], [([4, 8], F)])
    z.set_output(True).set_uid(3)
    g.set_preferred_engine_id_ext("NUMPY_REFERENCE").build(cpu)
    a = random_array((4, 8), F, rng)
    raises(S.NOT_SUPPORTED, g.execute, cpu, {1: a, 2: a, 3: np.empty((4, 8), np.float32)},
           match="registered without a numpy reference")
    hd.register_custom_op("demo.scale_add", _scale_add(), reference=lambda ins, data: [ins[0][:2]])
    raises(S.BAD_PARAM, g.execute, cpu, {1: a, 2: a, 3: np.empty((4, 8), np.float32)}, match="shape [2, 8]")


def test_register_replaces_and_unregister_removes():
    hd.register_custom_op("demo.b", _scale_add())
    hd.register_custom_op("demo.a", _axpy_mlir)
    hd.register_custom_op("demo.a", _scale_add())
    assert hd.registered_custom_ops() == ["demo.a", "demo.b"]
    assert custom_ops.lookup("demo.a").function is not None
    hd.unregister_custom_op("demo.a")
    assert hd.registered_custom_ops() == ["demo.b"]
    raises(S.BAD_PARAM, hd.unregister_custom_op, "demo.a", match="not registered")


def test_the_registry_module_stays_small_and_self_contained():
    """graph_ir/custom_ops.py imports nothing of the project and holds no state but REGISTRY."""
    import ast
    import graph_ir.custom_ops as mod
    tree = ast.parse(open(mod.__file__, encoding="utf-8").read())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "re", "dataclasses", "typing"}, imported
    mutable = [k for k, v in vars(mod).items() if isinstance(v, (dict, list, set)) and not k.startswith("__")]
    assert mutable == ["REGISTRY"], mutable
    assert os.path.getsize(mod.__file__) < 20_000
