"""First use: what a new user meets on a fresh install (import, handles, errors, files), one test
(or more) per behaviour. That bad arguments raise no raw exceptions is audited in test_public_errors.py."""
import os
import stat
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import REPO, raises

torch = pytest.importorskip("torch")
P = hd.PointwiseMode


def _matmul(cpu, data_type=hd.DataType.FLOAT, dims=((8, 64, 16), (1, 16, 32))):
    g = hd.Graph(io_data_type=data_type, compute_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(name="A", uid=1, dim=list(dims[0])), g.tensor(name="B", uid=2, dim=list(dims[1]))
    g.matmul(a, b).set_output(True).set_uid(3)
    return g.build(cpu)


# -- 1. torch bfloat16 CPU tensors -------------------------------------------------------------

def test_torch_bfloat16_cpu_tensors_bind_without_copy(cpu, rng):
    g = _matmul(cpu, hd.DataType.BFLOAT16)
    a = torch.from_numpy(rng.uniform(-1, 1, (8, 64, 16)).astype(np.float32)).to(torch.bfloat16)
    b = torch.from_numpy(rng.uniform(-1, 1, (1, 16, 32)).astype(np.float32)).to(torch.bfloat16)
    c = torch.full((8, 64, 32), float("nan"), dtype=torch.bfloat16)
    g.execute(cpu, {1: a, 2: b, 3: c})
    ref = a.double() @ b.double()
    err = (c.double() - ref).abs().max().item() / ref.abs().max().item()
    assert err < 1e-2, err                  # bf16 output rounding (8 bits of mantissa)
    # the bound view is the tensor's own memory: a second call writes into the same storage
    from hipdnn_iree.plugin_sdk.buffers import _host_from_dlpack
    assert _host_from_dlpack(c).__array_interface__["data"][0] == c.data_ptr()


def test_fp32_plan_given_a_bfloat16_tensor_gets_the_dtype_message(cpu):
    g = _matmul(cpu, hd.DataType.FLOAT)
    a = torch.zeros((8, 64, 16), dtype=torch.bfloat16)
    b = torch.zeros((1, 16, 32))
    c = torch.full((8, 64, 32), 7.0)
    raises(hd.Status.BAD_PARAM, g.execute, cpu, {1: a, 2: b, 3: c}, match="dtype bfloat16, the plan needs float32")
    assert bool((c == 7.0).all())


# -- 2. wrong shape with the right element count --------------------------------------------------

def test_buffer_with_right_element_count_but_wrong_shape_is_refused(cpu, rng):
    g = _matmul(cpu)
    a = rng.uniform(-1, 1, (64, 8, 16)).astype(np.float32)          # dims [8, 64, 16] transposed by mistake
    b = rng.uniform(-1, 1, (1, 16, 32)).astype(np.float32)
    c = np.full((8, 64, 32), 5.0, np.float32)
    e = raises(hd.Status.BAD_PARAM, g.execute, cpu, {1: a, 2: b, 3: c})
    assert "[64, 8, 16]" in str(e) and "[8, 64, 16]" in str(e)
    assert np.all(c == 5.0)
    for wrong in (a.reshape(-1), a.reshape(8, 1024)):
        raises(hd.Status.BAD_PARAM, g.execute, cpu, {1: wrong, 2: b, 3: c}, match="matches neither")


def test_logical_and_memory_order_shapes_are_both_accepted(cpu, rng):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    w = g.tensor(name="W", uid=2, dim=[1, 16, 32], stride=[512, 1, 16])        # transposed through strides
    a = g.tensor(name="A", uid=1, dim=[4, 8, 16])
    g.matmul(a, w).set_output(True).set_uid(3)
    g.build(cpu)
    xa = rng.uniform(-1, 1, (4, 8, 16)).astype(np.float32)
    phys = rng.uniform(-1, 1, (1, 32, 16)).astype(np.float32)                  # memory order [1, 32, 16]
    ref = xa.astype(np.float64) @ phys.transpose(0, 2, 1).astype(np.float64)
    for wbuf in (phys, phys.transpose(0, 2, 1)):                               # physical, then logical view
        c = np.zeros((4, 8, 32), np.float32)
        g.execute(cpu, {1: xa, 2: wbuf, 3: c})
        np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)
    raises(hd.Status.BAD_PARAM, g.execute, cpu,
           {1: xa, 2: np.ascontiguousarray(phys.transpose(0, 2, 1)), 3: np.zeros((4, 8, 32), np.float32)},
           match="do not match the declared strides")


# -- 3. rank-0 tensors --------------------------------------------------------------------------------

def test_rank0_tensors_are_refused_at_validate():
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[])
    g.pointwise(x, mode=P.RELU_FWD).set_output(True).set_uid(2)
    raises(hd.Status.BAD_PARAM, g.validate, match="rank-0")


# -- 5. unknown preferred engine -------------------------------------------------------------------

def test_unknown_preferred_engine_is_named_with_the_loaded_ones(cpu):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    g.pointwise(g.tensor(uid=1, dim=[2, 3]), mode=P.RELU_FWD).set_output(True).set_uid(2)
    g.set_preferred_engine_id_ext("FOO")
    e = raises(hd.Status.NOT_SUPPORTED, g.build, cpu)
    assert "'FOO'" in str(e) and "not loaded" in str(e)
    assert "IREE_LINALG" in str(e) and "NUMPY_REFERENCE" in str(e)


# -- 6. no ResourceWarning when compiling ----------------------------------------------------------

def test_compiling_leaves_no_unclosed_file(tmp_path):
    code = ("import gc, hipdnn_iree as hd\n"
            "g = hd.Graph(io_data_type=hd.DataType.FLOAT)\n"
            "g.pointwise(g.tensor(uid=1, dim=[2, 3]), mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(2)\n"
            "g.build(hd.create_handle(cache=False)); gc.collect(); print('built')\n")
    p = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", code], capture_output=True, text=True,
                       cwd=tmp_path)
    assert p.returncode == 0 and "built" in p.stdout, p.stderr
    assert "ResourceWarning" not in p.stderr, p.stderr


# -- 7. plan files respect the umask -----------------------------------------------------------------

@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_save_plan_respects_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        hd.save_plan(tmp_path / "p.plan", b"\x10\0\0\0plan bytes")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "p.plan").st_mode) == mode


# -- 8. inspect says the signature verified --------------------------------------------------------

def test_inspect_says_the_signature_verified(cpu, tmp_path):
    g = _matmul(cpu)
    key = tmp_path / "key"
    key.write_bytes(b"sekrit")
    hd.save_plan(tmp_path / "p.plan", g.serialize_compiled_plan(signing_key=b"sekrit"))
    cli = os.path.join(os.path.dirname(sys.executable), "hipdnn-iree")
    base = [cli] if os.path.exists(cli) else [sys.executable, "-m", "hipdnn_iree.cli"]
    p = subprocess.run(base + ["inspect", str(tmp_path / "p.plan"), "--verify-key-file", str(key)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "verified with the given key" in p.stdout, p.stdout
    p = subprocess.run(base + ["inspect", str(tmp_path / "p.plan")], capture_output=True, text=True)
    assert "not verified" in p.stdout, p.stdout
    p = subprocess.run(base + ["inspect", str(tmp_path / "p.plan"), "--json", "--verify-key-file", str(key)],
                       capture_output=True, text=True)
    import json
    assert json.loads(p.stdout)["envelope"]["signature_verified"] is True


# -- 9. load_plan on a device file -------------------------------------------------------------------

def test_load_plan_of_dev_zero_is_refused_without_reading_it():
    tracemalloc.start()
    try:
        raises(hd.Status.BAD_PARAM, hd.load_plan, "/dev/zero", match="not a plan")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak            # it used to read 1 GiB first


def test_load_plan_reads_a_plan_from_a_pipe(cpu):
    data = _matmul(cpu).serialize_compiled_plan()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: write the plan into the pipe, then exit
        os.close(r)
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    try:
        got = hd.load_plan(f"/dev/fd/{r}")
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert got == data


# -- 10. sizes no target can address -------------------------------------------------------------------

@pytest.mark.parametrize("dims", [[2**40, 2**40], [2**62, 4], [2**30, 2**30, 2**30]])
def test_huge_dims_are_refused_at_validate(dims):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    g.pointwise(g.tensor(name="x", uid=1, dim=dims), mode=P.RELU_FWD).set_output(True).set_uid(2)
    raises(hd.Status.BAD_PARAM, g.validate, match="limit of what a target can address")


# -- 11. messages ------------------------------------------------------------------------------------

def test_matmul_errors_name_the_op_once():
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    g.matmul(g.tensor(uid=1, dim=[2, 3]), g.tensor(uid=2, dim=[4, 5])).set_output(True).set_uid(3)
    e = raises(hd.Status.BAD_PARAM, g.validate, match="matmul 'matmul_0'")
    assert str(e).count("matmul 'matmul_0'") == 1, str(e)


def test_handle_with_a_target_for_another_device_speaks_of_the_handle():
    e = raises(hd.Status.NOT_SUPPORTED, lambda: hd.create_handle(device="local-task", target="rocm:gfx942"))
    assert "compiled for" not in str(e) and "device=None" in str(e), str(e)


def test_sample_with_a_bad_target_prints_no_traceback(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(REPO, "samples", "serialized_matmul.py"), "--target", "rocm"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "rocm:gfx942" in p.stderr


def test_data_types_print_as_enum_names():
    g = hd.Graph(io_data_type=hd.DataType.HALF)
    x = g.tensor(name="x", uid=1, dim=[2, 3])
    y = g.pointwise(x, mode=P.RELU_FWD).set_output(True)
    g.validate()
    for t in (x, y):
        assert isinstance(t.get_data_type(), hd.DataType)
        assert str(t.get_data_type()) == "DataType.HALF" and f"{t.get_data_type()}" == "DataType.HALF"
    assert str(hd.Status.BAD_PARAM) == "Status.BAD_PARAM"


# -- 12. conv outputs keep the input's layout ----------------------------------------------------------

def _nhwc(n, c, h, w):
    return [h * w * c, 1, w * c, c]


def test_conv_output_strides_follow_a_channels_last_input():
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[2, 8, 6, 6], stride=_nhwc(2, 8, 6, 6))
    w = g.tensor(name="w", uid=2, dim=[4, 8, 3, 3], stride=_nhwc(4, 8, 3, 3))
    y = g.conv_fprop(x, w, padding=[1, 1])
    dy = g.tensor(name="dy", uid=4, dim=[2, 4, 6, 6], stride=_nhwc(2, 4, 6, 6))
    dx = g.conv_dgrad(dy, w, padding=[1, 1]).set_dim([2, 8, 6, 6])
    dw = g.conv_wgrad(dy, x, padding=[1, 1]).set_dim([4, 8, 3, 3])
    for t in (y, dx, dw):
        t.set_output(True)
    g.validate()
    assert y.get_stride() == _nhwc(2, 4, 6, 6)
    assert dx.get_stride() == _nhwc(2, 8, 6, 6)
    assert dw.get_stride() == _nhwc(4, 8, 3, 3)
    g2 = hd.Graph(io_data_type=hd.DataType.FLOAT)          # channels-first in, channels-first out
    y2 = g2.conv_fprop(g2.tensor(uid=1, dim=[2, 8, 6, 6]), g2.tensor(uid=2, dim=[4, 8, 3, 3])).set_output(True)
    g2.validate()
    assert y2.get_stride() == [64, 16, 4, 1]


def test_nhwc_conv_bias_relu_output_allocated_like_the_input(cpu, rng):
    """The user's view: torch channels-last tensors in, a channels-last output buffer, no strides set."""
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", uid=1, dim=[2, 8, 6, 6], stride=_nhwc(2, 8, 6, 6))
    w = g.tensor(name="w", uid=2, dim=[4, 8, 3, 3], stride=_nhwc(4, 8, 3, 3))
    b = g.tensor(name="b", uid=3, dim=[1, 4, 1, 1])
    y = g.pointwise(g.pointwise(g.conv_fprop(x, w, padding=[1, 1]), b, mode=P.ADD), mode=P.RELU_FWD)
    y.set_output(True).set_uid(4)
    g.build(cpu)
    tx = torch.from_numpy(rng.uniform(-1, 1, (2, 8, 6, 6)).astype(np.float32)).to(memory_format=torch.channels_last)
    tw = torch.from_numpy(rng.uniform(-1, 1, (4, 8, 3, 3)).astype(np.float32)).to(memory_format=torch.channels_last)
    tb = torch.from_numpy(rng.uniform(-1, 1, (1, 4, 1, 1)).astype(np.float32))
    out = torch.empty((2, 4, 6, 6)).to(memory_format=torch.channels_last)
    g.execute(cpu, {1: tx, 2: tw, 3: tb, 4: out})
    ref = torch.relu(torch.nn.functional.conv2d(tx.double(), tw.double(), padding=1) + tb.double())
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


# -- found while writing docs/api.md: DOUBLE tensors ------------------------------------------------

def test_double_outputs_and_inputs_hold_float64_results(cpu, rng):
    """IREE demotes f64 to f32 unless told not to: a DOUBLE output used to hold garbage, silently."""
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    a = g.tensor(name="a", uid=1, dim=[3, 4])
    d = g.tensor(name="d", uid=2, dim=[3, 4], data_type=hd.DataType.DOUBLE)
    y = g.pointwise(g.pointwise(a, mode=P.ABS), d, mode=P.MUL, compute_data_type=hd.DataType.DOUBLE)
    y.set_output(True).set_uid(3).set_data_type(hd.DataType.DOUBLE)
    g.build(cpu)
    xa = rng.uniform(-2, 2, (3, 4)).astype(np.float32)
    xd = rng.uniform(-2, 2, (3, 4))
    out = np.full((3, 4), 7.0)
    g.execute(cpu, {1: xa, 2: xd, 3: out})
    np.testing.assert_allclose(out, np.abs(xa.astype(np.float64)) * xd, rtol=1e-12)
