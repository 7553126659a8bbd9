"""Audit of the public surface: bad arguments give hd.HipdnnError (BAD_PARAM and friends), never a
raw Python exception. Each case builds what it needs, then makes one bad call; a
call the library accepts is followed by validate(), which must then refuse it or pass."""
import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree import backend

BAD = ["float", object(), 1.5, -7, [1, "a"], {"a": 1}, b"xx", float("nan")]


def _graph():
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[2, 4, 8, 8])
    return g, x


def _calls():
    """(label, fn(bad)) pairs: fn makes exactly one call with the bad value."""
    def tensor_kw(kw):
        return lambda v: _graph()[0].tensor(**{"name": "t", "uid": 9, "dim": [2, 2], kw: v})

    def graph_kw(kw):
        return lambda v: hd.Graph(**{kw: v})

    def setter(name):
        return lambda v: getattr(_graph()[1], name)(v)

    def op(fn):
        def call(v):
            g, x = _graph()
            out = fn(g, x, v)
            return g, out
        return call

    m = lambda g: g.tensor(name="m", uid=5, dim=[2, 4, 8, 8])
    w = lambda g: g.tensor(name="w", uid=6, dim=[4, 4, 3, 3])
    s = lambda g: g.tensor(name="s", uid=7, dim=[1, 4, 8, 8])
    calls = {
        **{f"Graph({kw})": graph_kw(kw) for kw in ("io_data_type", "intermediate_data_type", "compute_data_type")},
        **{f"tensor({kw})": tensor_kw(kw) for kw in ("uid", "dim", "stride", "data_type", "value")},
        **{f"TensorAttributes.{n}": setter(n) for n in ("set_uid", "set_dim", "set_stride", "set_data_type")},
        "matmul(a)": op(lambda g, x, v: g.matmul(v, x)),
        "matmul(compute_data_type)": op(lambda g, x, v: g.matmul(x, m(g), compute_data_type=v)),
        "pointwise(mode)": op(lambda g, x, v: g.pointwise(x, mode=v)),
        "pointwise(b)": op(lambda g, x, v: g.pointwise(x, v, mode=hd.PointwiseMode.ADD)),
        "pointwise(alpha)": op(lambda g, x, v: g.pointwise(x, mode=hd.PointwiseMode.RELU_FWD, alpha=v)),
        "conv_fprop(padding)": op(lambda g, x, v: g.conv_fprop(x, w(g), padding=v)),
        "conv_fprop(stride)": op(lambda g, x, v: g.conv_fprop(x, w(g), stride=v)),
        "conv_fprop(dilation)": op(lambda g, x, v: g.conv_fprop(x, w(g), dilation=v)),
        "conv_fprop(compute_data_type)": op(lambda g, x, v: g.conv_fprop(x, w(g), compute_data_type=v)),
        "reduction(mode)": op(lambda g, x, v: g.reduction(x, mode=v)),
        "layernorm(epsilon)": op(lambda g, x, v: g.layernorm(x, s(g), s(g), epsilon=v)[0]),
        "layernorm(forward_phase)": op(lambda g, x, v: g.layernorm(x, s(g), s(g), forward_phase=v)[0]),
        "rmsnorm(epsilon)": op(lambda g, x, v: g.rmsnorm(x, s(g), epsilon=v)),
        "sdpa(attn_scale)": op(lambda g, x, v: g.sdpa(x, m(g), m(g), attn_scale=v)),
        "sdpa(is_causal)": op(lambda g, x, v: g.sdpa(x, m(g), m(g), is_causal=v)),
        "sdpa(mask)": op(lambda g, x, v: g.sdpa(x, m(g), m(g), mask=v)),
        "set_preferred_engine_id_ext": lambda v: _graph()[0].set_preferred_engine_id_ext(v),
        "create_handle(device)": lambda v: hd.create_handle(device=v),
        "create_handle(target)": lambda v: hd.create_handle(target=v),
        "create_handle(engine_plugins)": lambda v: hd.create_handle(engine_plugins=v),
        "create_handle(cache)": lambda v: hd.create_handle(cache=v),
        "save_plan(path)": lambda v: hd.save_plan(v, b"plan"),
        "save_plan(data)": lambda v: hd.save_plan("written.plan", v),
        "load_plan": lambda v: hd.load_plan(v),
        "empty_aligned(shape)": lambda v: hd.empty_aligned(v),
        "empty_aligned(dtype)": lambda v: hd.empty_aligned((2,), v),
        "engine_id_from_name": lambda v: hd.engine_id_from_name(v),
        "Graph.from_json": lambda v: hd.Graph.from_json(v),
        "Graph.from_compiled_plan(data)": lambda v: hd.Graph.from_compiled_plan(hd.create_handle(), v),
    }
    return sorted(calls.items())


CALLS = _calls()


@pytest.mark.parametrize("label,fn", CALLS, ids=[c[0] for c in CALLS])
def test_bad_arguments_raise_hipdnn_errors(label, fn, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # save_plan("float", ...) may well succeed: not in the repo
    for v in BAD:
        try:
            res = fn(v)
        except hd.HipdnnError:
            continue
        except Exception as e:  # noqa: BLE001 - this is what the test is about
            pytest.fail(f"{label} with {v!r} raised a raw {type(e).__name__}: {e}")
        if isinstance(res, tuple) and len(res) == 2 and isinstance(res[0], hd.Graph):
            g, out = res
            try:
                if isinstance(out, hd.TensorAttributes):
                    out.set_output(True)
                g.validate()
            except hd.HipdnnError:
                continue
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"{label} with {v!r} was accepted, then validate() raised a raw "
                            f"{type(e).__name__}: {e}")


def test_the_reported_case_names_the_value():
    with pytest.raises(hd.HipdnnError) as ei:
        hd.Graph(io_data_type="float")
    assert ei.value.status == hd.Status.BAD_PARAM
    assert "'float'" in str(ei.value) and "DataType" in str(ei.value)


def test_bad_execute_and_serialize_arguments(cpu):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(uid=1, dim=[2, 3]), g.tensor(uid=2, dim=[3, 2])
    g.matmul(a, b).set_output(True).set_uid(3)
    g.build(cpu)
    pack = {1: np.ones((2, 3), np.float32), 2: np.ones((3, 2), np.float32), 3: np.zeros((2, 2), np.float32)}
    for v in BAD:
        for fn in (lambda: g.execute(cpu, pack, workspace=v),
                   lambda: g.execute(v, pack),
                   lambda: g.execute(cpu, {**pack, 1: v}),
                   lambda: g.serialize_compiled_plan(signing_key=v),
                   lambda: hd.Graph.from_compiled_plan(cpu, g.serialize_compiled_plan(), verify_key=v),
                   lambda: backend.get_serialized_execution_plan(g.get_execution_plan(), v, None)):
            try:
                fn()
            except hd.HipdnnError:
                pass
            except Exception as e:  # noqa: BLE001
                pytest.fail(f"{v!r} raised a raw {type(e).__name__}: {e}")
    assert np.all(pack[3] == 0) or np.allclose(pack[3], 3.0)


# -- integers past int64, negative uids, NaN/inf parameters, bad workspaces --

def _matmul_graph(**a_kw):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    a = g.tensor(**{"name": "a", "uid": 1, "dim": [2, 3], **a_kw})
    g.matmul(a, g.tensor(name="b", uid=2, dim=[3, 2])).set_output(True).set_uid(3)
    return g


def _checked(fn):
    """Runs ``fn``; a graph it returns is validated and encoded (where int64 overflow used to escape)."""
    res = fn()
    if isinstance(res, hd.Graph):
        res.to_hipdnn_graph()
    return res


def _bad_param(fn, *words):
    with pytest.raises(hd.HipdnnError) as ei:
        _checked(fn)
    assert ei.value.status == hd.Status.BAD_PARAM, str(ei.value)
    for w in words:
        assert w in str(ei.value), str(ei.value)
    return ei.value


def _conv_graph(**kw):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x, w = g.tensor(name="x", uid=1, dim=[1, 2, 8, 8]), g.tensor(name="w", uid=2, dim=[2, 2, 3, 3])
    g.conv_fprop(x, w, **kw).set_output(True)
    return g


def _pointwise_graph(**kw):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    g.pointwise(g.tensor(name="x", uid=1, dim=[2, 8]), **kw).set_output(True)
    return g


_BIG = {"2**63": 2**63, "-2**63-1": -2**63 - 1, "2**64": 2**64, "2**70": 2**70}


@pytest.mark.parametrize("uid", [2**63, -1, -5, 2**70], ids=str)
@pytest.mark.parametrize("how", ["tensor", "set_uid", "output set_uid"])
def test_uid_out_of_range_is_bad_param_naming_uid(how, uid):
    if how == "tensor":
        fn = lambda: _matmul_graph(uid=uid)
    elif how == "set_uid":
        fn = lambda: hd.Graph().tensor(name="a").set_uid(uid)
    else:
        g = _matmul_graph()
        fn = lambda: g.pointwise(g.tensor(name="x", uid=4, dim=[2, 2]), mode=hd.PointwiseMode.ABS).set_uid(uid)
    _bad_param(fn, "uid", str(uid))


def test_largest_int64_uid_is_accepted():
    g = _matmul_graph(uid=2**63 - 1)
    g.to_hipdnn_graph()
    assert g._tensors[0].get_uid() == 2**63 - 1


@pytest.mark.parametrize("value", list(_BIG.values()), ids=list(_BIG))
@pytest.mark.parametrize("field", ["dim", "stride"])
def test_dims_and_strides_past_int64_are_bad_param(field, value):
    good = {"dim": [2, 3], "stride": [3, 1]}[field]
    _bad_param(lambda: _matmul_graph(**{field: [value, good[1]]}), f"{field} ", str(value))
    setter = getattr(hd.Graph().tensor(name="t"), f"set_{field}")
    _bad_param(lambda: setter([value, good[1]]), f"{field} ", str(value))


@pytest.mark.parametrize("field", ["padding", "pre_padding", "stride", "dilation"])
def test_conv_attributes_past_int64_are_bad_param(field):
    kw = {field: [2**64, 1]}
    if field == "pre_padding":
        kw["post_padding"] = [0, 0]
    _bad_param(lambda: _conv_graph(**kw), field, str(2**64))


def test_gen_index_axis_past_int64_is_bad_param():
    _bad_param(lambda: _pointwise_graph(mode=hd.PointwiseMode.GEN_INDEX, axis=2**64), "axis", str(2**64))


@pytest.mark.parametrize("engine", [2**63, -2**63 - 1, 2**64])
def test_preferred_engine_id_past_int64_is_bad_param(engine):
    _bad_param(lambda: hd.Graph().set_preferred_engine_id_ext(engine), "engine", str(engine))


def test_negative_preferred_engine_id_is_an_int64_engine_id():
    # FNV-1a 64 ids are signed int64: half of all engine names hash to a negative id.
    g = hd.Graph().set_preferred_engine_id_ext(-12345)
    assert g._preferred == -12345


@pytest.mark.parametrize("kw,field", [
    (dict(mode=hd.PointwiseMode.ELU_FWD, alpha=float("nan")), "alpha"),
    (dict(mode=hd.PointwiseMode.ELU_FWD, alpha=float("inf")), "alpha"),
    (dict(mode=hd.PointwiseMode.ELU_FWD, alpha=-float("inf")), "alpha"),
    (dict(mode=hd.PointwiseMode.SWISH_FWD, beta=float("inf")), "beta"),
    (dict(mode=hd.PointwiseMode.SOFTPLUS_FWD, beta=float("nan")), "beta"),
    (dict(mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=float("nan")), "relu_lower_clip"),
    (dict(mode=hd.PointwiseMode.RELU_FWD, relu_upper_clip=float("nan")), "relu_upper_clip"),
    (dict(mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=float("inf")), "relu_lower_clip"),
    (dict(mode=hd.PointwiseMode.RELU_FWD, relu_upper_clip=-float("inf")), "relu_upper_clip"),
    (dict(mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip_slope=float("inf")), "relu_lower_clip_slope"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_nan_or_infinite_pointwise_parameters_are_bad_param(kw, field):
    _bad_param(lambda: _pointwise_graph(**kw), field)


def test_open_ended_relu_clips_are_accepted(cpu, rng):
    # -inf / +inf clips mean "no clip" (+inf is the upper default): meaningful, so accepted.
    g = _pointwise_graph(mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=-float("inf"), relu_upper_clip=float("inf"))
    g.build(cpu)
    x = rng.uniform(-2, 2, (2, 8)).astype(np.float32)
    y = np.full((2, 8), np.nan, np.float32)
    uid = next(t.get_uid() for t in g._tensors if t is not g._tensors[0] and not t.get_is_virtual())
    g.execute(cpu, {1: x, uid: y})
    np.testing.assert_array_equal(y, np.clip(x, -np.inf, np.inf))


def test_nan_and_inf_scalar_constants_are_accepted():
    # NOTE: a constant is a value, not a parameter: -inf (masking) and NaN (fill) are legitimate.
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[2, 8])
    y = g.pointwise(x, g.tensor(value=float("-inf")), mode=hd.PointwiseMode.MAX_OP)
    g.pointwise(y, float("nan"), mode=hd.PointwiseMode.ADD).set_output(True)
    g.to_hipdnn_graph()


def _json_with(mutate):
    d = __import__("json").loads(_conv_graph(padding=[1, 1]).to_json())
    mutate(d)
    return d


def _renumber(d, uid):
    """Gives the conv's input x (tensors[0]) ``uid``, in the tensor and in the node that reads it."""
    old = d["tensors"][0]["uid"]
    d["tensors"][0]["uid"] = uid
    ports = d["nodes"][0]["inputs"]
    ports.update({k: uid for k, v in ports.items() if v == old})


@pytest.mark.parametrize("mutate,words", [
    (lambda d: _renumber(d, 2**63), ["uid", str(2**63)]),
    (lambda d: _renumber(d, -3), ["uid", "-3"]),
    (lambda d: d["tensors"][0]["strides"].__setitem__(0, 2**64), ["stride", str(2**64)]),
    (lambda d: d["tensors"][0]["dims"].__setitem__(0, 2**64), ["dim", str(2**64)]),
    (lambda d: d["nodes"][0]["attrs"].update(stride=[2**64, 1]), ["stride", str(2**64)]),
    (lambda d: d["nodes"][0]["attrs"].update(dilation=[1, -2**63 - 1]), ["dilation", str(-2**63 - 1)]),
], ids=["uid 2**63", "uid -3", "stride 2**64", "dim 2**64", "conv stride 2**64", "conv dilation"])
def test_from_json_values_past_int64_are_bad_param(mutate, words):
    d = _json_with(mutate)
    _bad_param(lambda: hd.Graph.from_json(d), *words)


def test_from_hipdnn_graph_negative_uid_is_bad_param():
    import dataclasses
    from graph_ir.desc import encode_graph
    g = _matmul_graph()
    g.validate()
    desc = g._desc
    tensors = tuple(dataclasses.replace(t, uid=-7) if t.uid == 1 else t for t in desc.tensors)
    node = desc.nodes[0]
    nodes = (dataclasses.replace(node, attrs=dataclasses.replace(node.attrs, a_uid=-7)),)
    data = encode_graph(dataclasses.replace(desc, tensors=tensors, nodes=nodes))
    _bad_param(lambda: hd.Graph.from_hipdnn_graph(data), "uid", "-7")


@pytest.fixture(scope="module")
def built_matmul():
    h = hd.create_handle()
    g = _matmul_graph()
    g.build(h)
    return h, g


@pytest.mark.parametrize("workspace", ["abc", 12, 1.5, object(), [0] * 8], ids=lambda v: type(v).__name__)
def test_workspace_that_is_not_a_buffer_is_bad_param(built_matmul, rng, workspace):
    h, g = built_matmul
    assert g.get_workspace_size() == 0
    out = np.full((2, 2), 7.0, np.float32)
    pack = {1: rng.random((2, 3), np.float32), 2: rng.random((3, 2), np.float32), 3: out}
    _bad_param(lambda: g.execute(h, pack, workspace=workspace), "workspace", type(workspace).__name__)
    assert np.all(out == 7.0)


@pytest.mark.parametrize("workspace", [None, b"", bytearray(16), np.empty(0, np.uint8), np.zeros((4, 4), np.float32)],
                         ids=["None", "bytes", "bytearray", "empty array", "array"])
def test_workspace_buffers_are_accepted(built_matmul, rng, workspace):
    h, g = built_matmul
    a, b = rng.random((2, 3), np.float32), rng.random((3, 2), np.float32)
    out = np.zeros((2, 2), np.float32)
    g.execute(h, {1: a, 2: b, 3: out}, workspace=workspace)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5)


def test_torch_tensor_workspace_is_accepted(built_matmul, rng):
    torch = pytest.importorskip("torch")
    h, g = built_matmul
    a, b = rng.random((2, 3), np.float32), rng.random((3, 2), np.float32)
    out = np.zeros((2, 2), np.float32)
    g.execute(h, {1: a, 2: b, 3: out}, workspace=torch.zeros(16, dtype=torch.uint8))
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")], ids=str)
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm", "sdpa"])
def test_nan_or_infinite_epsilon_and_attn_scale_are_bad_param(op, value):
    def fn():
        g = hd.Graph(io_data_type=hd.DataType.FLOAT)
        x = g.tensor(name="x", uid=1, dim=[2, 4, 8, 8])
        s = g.tensor(name="s", uid=2, dim=[1, 4, 8, 8])
        if op == "layernorm":
            y = g.layernorm(x, s, g.tensor(name="b", uid=3, dim=[1, 4, 8, 8]), epsilon=value)[0]
        elif op == "rmsnorm":
            y = g.rmsnorm(x, s, epsilon=value)
        else:
            y = g.sdpa(x, g.tensor(name="k", uid=3, dim=[2, 4, 8, 8]), g.tensor(name="v", uid=4, dim=[2, 4, 8, 8]),
                       attn_scale=value)
        y.set_output(True)
        return g
    _bad_param(fn, "attn_scale" if op == "sdpa" else "epsilon")
