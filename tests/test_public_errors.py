"""Audit of the public surface: bad arguments give hd.HipdnnError (BAD_PARAM and friends), never a
raw Python exception (issue 9, item 4). Each case builds what it needs, then makes one bad call; a
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
