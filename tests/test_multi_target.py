"""FUSPLAN kind 3: one plan, one module per target.

Compiling six targets takes a while on a small machine: the graph is tiny and the plan is built
once per module (fixtures below)."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.plugins.iree_linalg import fusplan as _fusplan
from hipdnn_iree.plugins.iree_linalg import multitarget as _multitarget
from hipdnn_iree.plugins.iree_linalg import IreeLinalgPlugin
from harness import raises, random_array, run_python

S = hd.Status
SIX = ["rocm:gfx90a", "rocm:gfx942", "rocm:gfx950", "rocm:gfx1100", "cuda:sm_80", "llvm-cpu:x86-64-v3"]
CPU_LEVEL = _multitarget.cpu_level()


def graph():
    g = hd.Graph(name="mt", io_data_type=hd.DataType.FLOAT)
    x, w = g.tensor(name="X", uid=1, dim=[4, 16]), g.tensor(name="W", uid=2, dim=[16, 8])
    g.pointwise(g.matmul(x, w), mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(3)
    return g


def reference(x, w):
    return np.maximum(x.astype(np.float64) @ w, 0)


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    h = hd.create_handle(device=None, target=SIX)
    g = graph()
    g.build(h)
    data = g.serialize_compiled_plan()
    path = tmp_path_factory.mktemp("mt") / "six.plan"
    hd.save_plan(path, data)
    return h, g, data, path


@pytest.fixture(scope="module")
def cpu_levels():
    """A CPU-only plan with every x86-64 level up to this machine's, plus one above it if any."""
    levels = ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"]
    h = hd.create_handle(device="local-task", target=[f"llvm-cpu:{lv}" for lv in levels])
    g = graph()
    g.build(h)
    return h, g, g.serialize_compiled_plan()


def test_six_target_plan_layout(six):
    h, g, data, _ = six
    assert h.targets == tuple(SIX) and h.target == SIX[0]
    env = _envelope.decode(data)
    assert env.version == 1 and env.layout == _envelope.LAYOUT_RFC
    fp = _fusplan.unpack(env.plugin_payload)
    assert fp.payload_kind == _fusplan.KIND_MULTI_TARGET and fp.format_minor == 1
    assert [e.target for e in fp.entries] == SIX
    assert fp.metadata.target_arch == ",".join(SIX)
    formats = {"rocm": b"rocm-hsaco-fb", "cuda": b"cuda-nvptx-fb", "llvm-cpu": b"embedded-elf-x86_64"}
    body_at = env.payload_offset + fp.header_size
    for e in fp.entries:
        mod = bytes(fp.module(e))
        assert (body_at + e.offset) % 64 == 0
        assert formats[e.target.split(":")[0]] in mod
        assert e.target.split(":")[1].encode() in mod
        assert {"rocm": "hip", "cuda": "cuda", "llvm-cpu": "local"}[e.target.split(":")[0]] == e.target_device
    # a compile-only handle restores it and re-serializes every module
    r = hd.Graph.from_compiled_plan(hd.create_handle(device=None, target="rocm:gfx942"), data)
    assert r.to_compiled_plan_binary() == data


@pytest.mark.skipif(CPU_LEVEL not in ("x86-64-v3", "x86-64-v4"), reason="needs an x86-64-v3 CPU")
def test_cpu_handle_runs_the_cpu_module_of_a_six_target_plan(six, rng):
    _, _, data, path = six
    h = hd.create_handle()
    for r in (hd.Graph.from_compiled_plan(h, data), hd.Graph.from_compiled_plan_file(h, path)):
        x, w = random_array([4, 16], rng=rng), random_array([16, 8], rng=rng)
        y = np.full((4, 8), np.nan, np.float32)
        r.execute(h, {1: x, 2: w, 3: y})
        np.testing.assert_allclose(y, reference(x, w), rtol=1e-5, atol=1e-5)
        assert str(r.get_execution_plan().context.target) == "llvm-cpu:x86-64-v3"


def test_no_runnable_entry_names_every_target_and_the_device(six):
    _, g, _, _ = six
    h = hd.create_handle(device=None, target=["rocm:gfx90a", "cuda:sm_80"])
    g2 = graph()
    g2.build(h)
    data = g2.serialize_compiled_plan()
    e = raises(S.NOT_SUPPORTED, hd.Graph.from_compiled_plan, hd.create_handle(), data)
    for t in ("rocm:gfx90a", "cuda:sm_80", "local-task"):
        assert t in str(e), str(e)


def test_selection_rules():
    choose = _multitarget.choose
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target as T
    # AMD: the exact gfx arch only
    assert choose(SIX, "hip://0", T("rocm:gfx942")) == 1
    assert choose(SIX, "hip://0", T("rocm:gfx1100")) == 3
    raises(S.NOT_SUPPORTED, choose, SIX, "hip://0", T("rocm:gfx908"), match="gfx908")
    # CUDA: the highest sm not above the device's
    cuda = ["cuda:sm_70", "cuda:sm_80", "cuda:sm_86"]
    assert choose(cuda, "cuda", T("cuda:sm_90")) == 2
    assert choose(cuda, "cuda", T("cuda:sm_80")) == 1
    assert choose(cuda, "cuda", T("cuda:sm_75")) == 0
    e = raises(S.NOT_SUPPORTED, choose, cuda, "cuda", T("cuda:sm_60"))
    assert all(t in str(e) for t in cuda) and "sm_60" in str(e)
    # CPU: the best level this CPU supports
    assert _multitarget.cpu_level({"sse2"}) in ("x86-64", None)
    flags_v2 = set().union(*[_multitarget._X86_LEVELS[k] for k in ("x86-64", "x86-64-v2")])
    flags_v3 = flags_v2 | _multitarget._X86_LEVELS["x86-64-v3"]
    if _multitarget.cpu_level(flags_v3) is not None:   # on x86-64
        assert _multitarget.cpu_level(flags_v2) == "x86-64-v2" and _multitarget.cpu_level(flags_v3) == "x86-64-v3"


def test_cpu_level_choice_runs(cpu_levels, rng):
    h, g, data = cpu_levels
    fp = _fusplan.unpack(_envelope.decode(data).plugin_payload)
    assert [e.target for e in fp.entries] == [f"llvm-cpu:{lv}" for lv in ("x86-64", "x86-64-v2", "x86-64-v3",
                                                                          "x86-64-v4")]
    r = hd.Graph.from_compiled_plan(h, data)
    assert str(r.get_execution_plan().context.target) == f"llvm-cpu:{CPU_LEVEL}"
    x, w = random_array([4, 16], rng=rng), random_array([16, 8], rng=rng)
    y = np.full((4, 8), np.nan, np.float32)
    r.execute(h, {1: x, 2: w, 3: y})
    np.testing.assert_allclose(y, reference(x, w), rtol=1e-5, atol=1e-5)
    # the building graph runs the handle's own module too
    y2 = np.full((4, 8), np.nan, np.float32)
    g.execute(h, {1: x, 2: w, 3: y2})
    np.testing.assert_allclose(y2, y, rtol=0, atol=0)


def test_target_list_errors():
    raises(S.BAD_PARAM, lambda: hd.create_handle(device=None, target=[]))
    raises(S.BAD_PARAM, lambda: hd.create_handle(device=None, target=["rocm:gfx942", "rocm:gfx942"]))
    e = raises(S.NOT_SUPPORTED, lambda: hd.create_handle(device="local-task", target=["rocm:gfx942", "cuda:sm_80"]))
    assert "rocm:gfx942" in str(e) and "local-task" in str(e)


def test_signed_kind3_and_tampered_index(cpu_levels):
    h, g, _ = cpu_levels
    signed = g.serialize_compiled_plan(signing_key=b"k")
    hd.Graph.from_compiled_plan(h, signed, verify_key=b"k")
    raises(S.BAD_PARAM, lambda: hd.Graph.from_compiled_plan(h, signed, verify_key=b"other"), match="does not verify")
    bad = bytearray(signed)
    env = _envelope.decode(signed)
    fp = _fusplan.unpack(env.plugin_payload)
    bad[env.payload_offset + fp.header_size + 8] ^= 0x40     # inside the index
    raises(S.PLUGIN_ERROR, hd.Graph.from_compiled_plan, h, bytes(bad), match="digest mismatch")


def test_cli_compile_and_inspect_a_multi_target_plan(tmp_path):
    g = graph()
    (tmp_path / "g.json").write_text(g.to_json())
    cli = os.path.join(os.path.dirname(sys.executable), "hipdnn-iree")
    base = [cli] if os.path.exists(cli) else [sys.executable, "-m", "hipdnn_iree.cli"]
    p = subprocess.run(base + ["compile", str(tmp_path / "g.json"), "--target", "llvm-cpu:x86-64,cuda:sm_80",
                               "-o", str(tmp_path / "two.plan")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "llvm-cpu:x86-64,cuda:sm_80" in p.stdout
    p = subprocess.run(base + ["inspect", str(tmp_path / "two.plan")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "payload kind 3" in p.stdout and "modules: 2, one per target" in p.stdout
    assert "[0] llvm-cpu:x86-64" in p.stdout and "[1] cuda:sm_80" in p.stdout and "cuda-nvptx-fb" in p.stdout
    p = subprocess.run(base + ["inspect", str(tmp_path / "two.plan"), "--json"], capture_output=True, text=True)
    entries = json.loads(p.stdout)["fusplan"]["entries"]
    assert [e["target"] for e in entries] == ["llvm-cpu:x86-64", "cuda:sm_80"]
    assert all(e["offset_in_file"] % 64 == 0 for e in entries)
    if CPU_LEVEL is not None:   # the CPU entry restores and runs in a fresh process
        x = np.arange(64, dtype=np.float32).reshape(4, 16) / 64
        w = np.linspace(-1, 1, 128, dtype=np.float32).reshape(16, 8)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "w.npy", w)
        p = subprocess.run(base + ["run", str(tmp_path / "two.plan"), "-i", f"1={tmp_path / 'x.npy'}",
                                   "-i", f"2={tmp_path / 'w.npy'}", "-o", str(tmp_path / "out")],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        np.testing.assert_allclose(np.load(tmp_path / "out" / "3.npy"), reference(x, w), rtol=1e-5, atol=1e-5)
