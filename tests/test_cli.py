"""The ``hipdnn-iree`` command line, run as a real subprocess (``python -m hipdnn_iree.cli`` and the
installed console script) on real plan files: compile, inspect, run, bench, cache, errors and exit codes."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

import hipdnn_iree as hd
from harness import REPO

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BAD_PLAN, EXIT_DEVICE = 0, 1, 2, 3, 4
M, K, N = 16, 32, 8


def cli(*args, env_extra=None, timeout=300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("HIPDNN_IREE_CACHE", "0")   # NOTE: never touch the user's compile cache
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "hipdnn_iree.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


def graph_json() -> str:
    """X [M,K] @ W [K,N] (stored transposed) + bias [1,N] (broadcast via stride 0), then ReLU."""
    g = hd.Graph(name="cli_mlp", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="X", uid=1, dim=[M, K])
    w = g.tensor(name="W", uid=2, dim=[K, N], stride=[1, K])
    b = g.tensor(name="bias", uid=3, dim=[M, N], stride=[0, 1])
    y = g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD)
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_uid(4)
    return g.to_json()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "graph.json").write_text(graph_json())
    p = cli("compile", d / "graph.json", "-o", d / "cpu.plan")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    assert "wrote" in p.stdout and (d / "cpu.plan").stat().st_size > 1000
    p = cli("compile", d / "graph.json", "--target", "rocm:gfx942", "-o", d / "rocm.plan")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    rng = np.random.default_rng(11)
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)            # logical dims, C order: the CLI re-lays it out
    b = np.broadcast_to(rng.standard_normal((1, N), dtype=np.float32), (M, N))
    for name, arr in (("x", x), ("w", w), ("b", b), ("x64", x.astype(np.float64))):
        np.save(d / f"{name}.npy", arr)
    (d / "garbage.plan").write_bytes(b"\x10\x00\x00\x00 this is not a plan" * 10)
    (d / "truncated.plan").write_bytes((d / "cpu.plan").read_bytes()[:2000])
    return d, np.maximum(x.astype(np.float64) @ w + b, 0)


def _inputs(d):
    return ["-i", f"1={d / 'x.npy'}", "-i", f"2={d / 'w.npy'}", "-i", f"3={d / 'b.npy'}"]


@pytest.mark.parametrize("command", [None, "inspect", "run", "bench", "compile", "cache"])
def test_help_everywhere(command):
    p = cli(*([command] if command else []), "--help")
    assert p.returncode == EXIT_OK and "usage: hipdnn-iree" in p.stdout, p.stderr
    assert "exit codes" in p.stdout.replace("\n", " ")


def test_no_command_is_a_usage_error():
    p = cli()
    assert p.returncode == EXIT_USAGE and "usage" in p.stderr


def test_console_script(files):
    d, _ = files
    exe = shutil.which("hipdnn-iree", path=sysconfig.get_path("scripts") + os.pathsep + os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("the hipdnn-iree console script is not installed (pip install -e . to get it)")
    env = {**os.environ, "HIPDNN_IREE_CACHE": "0"}
    p = subprocess.run([exe, "--version"], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.strip() == f"hipdnn-iree {hd.__version__}"
    p = subprocess.run([exe, "inspect", str(d / "cpu.plan")], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "IREE_LINALG" in p.stdout, p.stderr


def test_inspect_text(files):
    d, _ = files
    p = cli("inspect", d / "cpu.plan")
    assert p.returncode == EXIT_OK, p.stderr
    out = p.stdout
    for must in ("envelope: version 1 (rfc-v1 layout)", "engine IREE_LINALG", "tensor uids: [1, 2, 3, 4]", "FUSPLAN: format 1.1",
                 "payload kind 2", "sync func @main(", "iree.abi.output = 0", "built for: llvm-cpu:host",
                 "executable target: llvm-cpu / embedded-elf-", "uid 4: output", "strides [1, 32]"):
        assert must in out, f"{must!r} missing from:\n{out}"


def test_inspect_json(files):
    d, _ = files
    p = cli("inspect", d / "cpu.plan", "--json")
    assert p.returncode == EXIT_OK, p.stderr
    info = json.loads(p.stdout)
    env, mod = info["envelope"], info["module"]
    assert env["engine_name"] == "IREE_LINALG" and env["engine_id"] == hd.engine_id_from_name("IREE_LINALG")
    assert env["tensor_uids"] == [1, 2, 3, 4] and env["workspace_size"] == 0
    head = info["fusplan"]
    assert head["payload_kind"] == 2 and head["header_bytes"] % 64 == 0 and head["body_offset_in_file"] % 64 == 0
    assert env["identity_source"] == "FUSPLAN metadata" and env["target_arch"] == "llvm-cpu:host"
    assert info["file_bytes"] == (d / "cpu.plan").stat().st_size
    assert mod["vmfb_bytes"] == env["plugin_payload_bytes"] - head["header_bytes"]
    assert [(t["uid"], t["role"]) for t in mod["abi"]["tensors"]] == [(1, "input"), (2, "input"), (3, "input"),
                                                                      (4, "output")]
    assert mod["abi"]["tensors"][2]["strides"] == [0, 1]
    assert mod["declaration"].startswith("sync func @main") and mod["executables"]
    assert all(t["backend"] == "llvm-cpu" for t in mod["targets"])


def test_inspect_gpu_plan_without_a_gpu(files):
    d, _ = files
    p = cli("inspect", d / "rocm.plan", "--json")
    assert p.returncode == EXIT_OK, p.stderr
    mod = json.loads(p.stdout)["module"]
    assert {"backend": "rocm", "format": "rocm-hsaco-fb", "arch": "gfx942"} in mod["targets"]
    assert mod["abi"]["target"] == "rocm:gfx942"


def test_run_writes_outputs(files, tmp_path):
    d, want = files
    out = tmp_path / "out"
    p = cli("run", d / "cpu.plan", *_inputs(d), "--output-dir", out, "--device", "local-task")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    assert sorted(os.listdir(out)) == ["4.npy"] and "uid 4" in p.stdout
    np.testing.assert_allclose(np.load(out / "4.npy"), want, rtol=1e-4, atol=1e-4)


def test_iree_flag_reaches_the_compiler(files, tmp_path):
    """--iree-flag goes through the handle's session into iree-compile and into the cache key: a
    flag that changes the module gives other plan bytes (also with a warm cache holding the
    unflagged module), and the plan still computes the right numbers."""
    d, want = files
    env = {"HIPDNN_IREE_CACHE": "1", "HIPDNN_IREE_CACHE_DIR": str(tmp_path / "cache")}
    plain, flagged = tmp_path / "plain.plan", tmp_path / "flagged.plan"
    for path, extra in ((plain, []), (flagged, ["--iree-flag=--iree-vm-emit-polyglot-zip=false"])):
        p = cli("compile", d / "graph.json", "-o", path, *extra, env_extra=env)
        assert p.returncode == EXIT_OK, p.stdout + p.stderr
    assert plain.read_bytes() != flagged.read_bytes()
    out = tmp_path / "out"
    p = cli("run", flagged, *_inputs(d), "--output-dir", out, "--device", "local-task")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    np.testing.assert_allclose(np.load(out / "4.npy"), want, rtol=1e-4, atol=1e-4)


def test_bench(files):
    d, _ = files
    p = cli("bench", d / "cpu.plan", "-n", "7", "--restores", "2", "--json", "--progress", "always")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    r = json.loads(p.stdout)
    assert r["execute_s"]["count"] == 7 and r["restore_s"]["count"] == 2 and r["first_execute_s"]["count"] == 2
    for k in ("restore_s", "first_execute_s", "execute_s"):
        assert 0 < r[k]["min"] <= r[k]["median"] <= r[k]["max"]
    assert "bench: 7/7" in p.stderr                         # the plain-text progress lines (stderr is no tty)
    p = cli("bench", d / "cpu.plan", "-n", "3", "--restores", "1", *_inputs(d))
    assert p.returncode == EXIT_OK and "execute:" in p.stdout and "bench:" not in p.stderr, p.stderr   # short: no bar


def test_compile_uses_and_skips_the_cache(files, tmp_path):
    d, _ = files
    env = {"HIPDNN_IREE_CACHE": "1", "HIPDNN_IREE_CACHE_DIR": str(tmp_path / "cache")}
    assert cli("compile", d / "graph.json", "-o", tmp_path / "a.plan", "--no-cache", env_extra=env).returncode == 0
    p = cli("cache", "info", env_extra=env)
    assert p.returncode == 0 and "entries: 0" in p.stdout, p.stdout
    assert cli("compile", d / "graph.json", "-o", tmp_path / "b.plan", env_extra=env).returncode == 0
    assert "entries: 1" in cli("cache", "info", env_extra=env).stdout
    assert (tmp_path / "a.plan").read_bytes() == (tmp_path / "b.plan").read_bytes() == (d / "cpu.plan").read_bytes()
    p = cli("cache", "clear", env_extra=env)
    assert p.returncode == 0 and "removed 1" in p.stdout


@pytest.mark.parametrize("case, code, words", [
    ("missing_plan", EXIT_USAGE, "does not exist"),
    ("garbage_plan", EXIT_BAD_PLAN, "not a usable plan"),
    ("truncated_plan", EXIT_BAD_PLAN, "not a usable plan"),
    ("missing_input", EXIT_USAGE, "missing --input for uid 3"),
    ("missing_input_file", EXIT_USAGE, "does not exist"),
    ("bad_input_syntax", EXIT_USAGE, "UID=FILE.npy"),
    ("unknown_uid", EXIT_USAGE, "not inputs of this plan"),
    ("wrong_dtype", EXIT_USAGE, "float64"),
    ("wrong_shape", EXIT_USAGE, "does not match"),
    ("gpu_plan_on_cpu", EXIT_DEVICE, "rocm:gfx942"),
    ("cpu_plan_on_cuda", EXIT_DEVICE, "llvm-cpu"),
    ("gpu_plan_default_device", EXIT_DEVICE, "hip"),
])
def test_run_errors(files, tmp_path, case, code, words):
    d, _ = files
    plan, inputs, extra = d / "cpu.plan", _inputs(d), []
    if case == "missing_plan":
        plan = d / "nope.plan"
    elif case == "garbage_plan":
        plan = d / "garbage.plan"
    elif case == "truncated_plan":
        plan = d / "truncated.plan"
    elif case == "missing_input":
        inputs = inputs[:4]
    elif case == "missing_input_file":
        inputs[1] = f"1={d / 'nope.npy'}"
    elif case == "bad_input_syntax":
        inputs[1] = "x.npy"
    elif case == "unknown_uid":
        inputs += ["-i", f"9={d / 'x.npy'}"]
    elif case == "wrong_dtype":
        inputs[1] = f"1={d / 'x64.npy'}"
    elif case == "wrong_shape":
        inputs[1] = f"1={d / 'w.npy'}"
    elif case == "gpu_plan_on_cpu":
        plan, extra = d / "rocm.plan", ["--device", "local-task"]
    elif case == "cpu_plan_on_cuda":
        extra = ["--device", "cuda"]
    elif case == "gpu_plan_default_device":
        plan = d / "rocm.plan"
    p = cli("run", plan, *inputs, "--output-dir", tmp_path / "out", *extra)
    assert p.returncode == code, f"exit {p.returncode}\n{p.stdout}{p.stderr}"
    assert words in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


@pytest.mark.parametrize("case, code, words", [
    ("missing_graph", EXIT_USAGE, "does not exist"),
    ("not_json", EXIT_BAD_PLAN, "not valid JSON"),
    ("invalid_graph", EXIT_BAD_PLAN, "dims"),
    ("bad_target", EXIT_USAGE, "unknown backend"),
    ("bad_flag", EXIT_USAGE, "--no-such-flag"),
])
def test_compile_errors(files, tmp_path, case, code, words):
    d, _ = files
    graph, extra = d / "graph.json", []
    if case == "missing_graph":
        graph = tmp_path / "nope.json"
    elif case == "not_json":
        graph = tmp_path / "g.json"
        graph.write_text("{ nope")
    elif case == "invalid_graph":
        doc = json.loads(graph_json())
        doc["tensors"][0]["dims"] = [M, K + 1]      # X no longer fits the matmul
        graph = tmp_path / "g.json"
        graph.write_text(json.dumps(doc))
    elif case == "bad_target":
        extra = ["--target", "tpu:v9"]
    elif case == "bad_flag":
        extra = ["--iree-flag=--no-such-flag"]
    p = cli("compile", graph, "-o", tmp_path / "x.plan", *extra)
    assert p.returncode == code, f"exit {p.returncode}\n{p.stdout}{p.stderr}"
    assert words in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "x.plan").exists()


# -- cache folders that are files, kind-1 bench target, --json on run and cache ----

@pytest.mark.parametrize("action", ["info", "clear"])
def test_cache_refuses_a_file_as_its_folder(tmp_path, action):
    f = tmp_path / "not_a_folder"
    f.write_bytes(b"precious")
    for path in (f, "/etc/passwd", "/dev/null"):
        p = cli("cache", action, "--dir", path)
        assert p.returncode == EXIT_USAGE, p.stdout + p.stderr
        assert str(path) in p.stderr and "is not a folder" in p.stderr and p.stdout == "", p.stderr
    assert f.read_bytes() == b"precious"


def test_cache_json(files, tmp_path):
    d, _ = files
    cache = tmp_path / "cache"
    p = cli("cache", "info", "--dir", cache, "--json")
    assert p.returncode == EXIT_OK, p.stderr
    r = json.loads(p.stdout)
    assert r["folder"] == str(cache) and r["exists"] is False and r["entries"] == 0 and r["bytes"] == 0
    p = cli("compile", d / "graph.json", "-o", tmp_path / "x.plan", env_extra={"HIPDNN_IREE_CACHE": "1",
                                                                               "HIPDNN_IREE_CACHE_DIR": str(cache)})
    assert p.returncode == EXIT_OK, p.stderr
    r = json.loads(cli("cache", "info", "--dir", cache, "--json").stdout)
    assert r["exists"] is True and r["entries"] == 1 and r["bytes"] > 1000 and r["max_bytes"] > 0
    p = cli("cache", "clear", "--dir", cache, "--json")
    assert p.returncode == EXIT_OK and json.loads(p.stdout) == {"action": "clear", "folder": str(cache), "removed": 1}
    assert json.loads(cli("cache", "info", "--dir", cache, "--json").stdout)["entries"] == 0


def test_run_json(files, tmp_path):
    d, want = files
    out = tmp_path / "out"
    p = cli("run", d / "cpu.plan", *_inputs(d), "-o", out, "--json")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    r = json.loads(p.stdout)
    assert r["device"] == "local-task" and r["target"].startswith("llvm-cpu")
    assert r["outputs"] == [{"uid": 4, "name": r["outputs"][0]["name"], "dtype": "float32", "shape": [M, N],
                             "path": str(out / "4.npy")}]
    np.testing.assert_allclose(np.load(r["outputs"][0]["path"]), want, rtol=1e-4, atol=1e-4)


def test_bench_of_a_kind1_plan_names_the_target_it_compiled_for(files, tmp_path):
    d, _ = files
    g = hd.Graph.from_json((d / "graph.json").read_text())
    kind1 = tmp_path / "kind1.plan"
    g.build(hd.create_handle(cache=False))
    hd.save_plan(kind1, g.serialize_compiled_plan(payload="hipdnn_graph"))
    p = cli("bench", kind1, "-n", "2", "--restores", "1", "--json")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    target = json.loads(p.stdout)["target"]
    assert target.startswith("llvm-cpu") and "kind-1" in target, target
    p = cli("bench", kind1, "-n", "2", "--restores", "1")
    assert p.returncode == EXIT_OK and "target llvm-cpu" in p.stdout, p.stdout + p.stderr


# -- a several-target plan names the module that ran, not the plan's first target --------------------
@pytest.mark.skipif(__import__("hipdnn_iree.plugins.iree_linalg.multitarget", fromlist=["cpu_level"]).cpu_level()
                    is None, reason="needs an x86-64 CPU (the plan's CPU module is llvm-cpu:x86-64)")
def test_run_and_bench_of_a_multi_target_plan_name_the_module_that_ran(files, tmp_path):
    d, want = files
    plan = tmp_path / "mt.plan"
    p = cli("compile", d / "graph.json", "--target", "rocm:gfx942,llvm-cpu:x86-64", "-o", plan)
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    info = json.loads(cli("inspect", plan, "--json").stdout)
    assert [e["target"] for e in info["fusplan"]["entries"]] == ["rocm:gfx942", "llvm-cpu:x86-64"]
    out = tmp_path / "out"
    p = cli("run", plan, *_inputs(d), "-o", out, "--json")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    r = json.loads(p.stdout)
    assert r["device"] == "local-task" and r["target"] == "llvm-cpu:x86-64", r
    np.testing.assert_allclose(np.load(out / "4.npy"), want, rtol=1e-4, atol=1e-4)   # the CPU module ran
    p = cli("run", plan, *_inputs(d), "-o", out)
    assert p.returncode == EXIT_OK and "target llvm-cpu:x86-64, device local-task" in p.stdout, p.stdout + p.stderr
    assert "gfx942" not in p.stdout
    p = cli("bench", plan, "-n", "2", "--restores", "1", "--json")
    assert p.returncode == EXIT_OK, p.stdout + p.stderr
    assert json.loads(p.stdout)["target"] == "llvm-cpu:x86-64"
    p = cli("bench", plan, "-n", "2", "--restores", "1")
    assert p.returncode == EXIT_OK and "target llvm-cpu:x86-64, device local-task" in p.stdout, p.stdout


# -- hipdnn-iree mlir: the MLIR the IREE engine compiles for a graph file ----------------------------------
def test_mlir_prints_the_module_of_graph_json_and_of_a_hipdnn_graph_flatbuffer(files, tmp_path):
    d, _ = files
    fb = tmp_path / "graph.fb"
    fb.write_bytes(hd.Graph.from_json((d / "graph.json").read_text()).to_hipdnn_graph())
    p = cli("mlir", d / "graph.json")
    assert p.returncode == EXIT_OK and p.stderr == "", p.stdout + p.stderr
    assert "func.func @main" in p.stdout and "linalg.matmul" in p.stdout and "llvm-cpu:host" in p.stdout
    q = cli("mlir", fb)
    assert q.returncode == EXIT_OK and q.stdout == p.stdout, q.stdout[:500] + q.stderr
    r = cli("mlir", fb, "--target", "rocm:gfx942")
    assert r.returncode == EXIT_OK and "func.func @main" in r.stdout and "rocm:gfx942" in r.stdout, r.stderr


@pytest.mark.parametrize("case,code,words", [
    ("garbage", EXIT_BAD_PLAN, "is not a valid graph (hipDNN graph FlatBuffer)"),
    ("bad_json", EXIT_BAD_PLAN, "is not a valid graph (graph JSON): graph JSON"),
    ("no_ops", EXIT_BAD_PLAN, "has no operations"),
    ("dev_zero", EXIT_BAD_PLAN, "nor a hipDNN graph FlatBuffer"),
    ("missing", EXIT_USAGE, "does not exist"),
    ("bad_target", EXIT_USAGE, "unknown backend 'tpu'"),
    ("two_targets", EXIT_USAGE, "name one target"),
])
def test_mlir_errors_are_one_line_without_a_traceback(files, tmp_path, case, code, words):
    d, _ = files
    graph, extra = d / "graph.json", []
    if case == "garbage":
        graph = d / "garbage.plan"
    elif case == "bad_json":
        graph = tmp_path / "bad.json"
        graph.write_text('{"tensors": 5}')
    elif case == "no_ops":
        graph = tmp_path / "empty.json"
        graph.write_text(json.dumps({**json.loads((d / "graph.json").read_text()), "nodes": []}))
    elif case == "dev_zero":
        graph = "/dev/zero"
    elif case == "missing":
        graph = tmp_path / "nope.json"
    elif case == "bad_target":
        extra = ["--target", "tpu"]
    elif case == "two_targets":
        extra = ["--target", "llvm-cpu,rocm:gfx942"]
    p = cli("mlir", graph, *extra)
    assert p.returncode == code, p.stdout + p.stderr
    assert p.stdout == "" and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith("hipdnn-iree mlir: error: ") and words in p.stderr, p.stderr
