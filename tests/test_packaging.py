"""The wheel carries both import packages: install it into a fresh venv and run a sample from elsewhere."""
import os
import subprocess
import sys
import venv

import pytest

from harness import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    REPO], check=True, capture_output=True)
    (whl,) = [p for p in out.iterdir() if p.suffix == ".whl"]
    return whl


def test_wheel_contents(wheel):
    import zipfile
    names = zipfile.ZipFile(wheel).namelist()
    for must in ("hipdnn_iree/__init__.py", "hipdnn_iree/flatbuffers_sdk/execution_plan_generated.py",
                 "hipdnn_iree/plugins/iree_linalg/plugin.py", "lowering/__init__.py", "graph_ir/_fbs/graph_generated.py",
                 "lowering/ops/matmul.py"):
        assert must in names, must
    meta = [n for n in names if n.endswith("entry_points.txt")]
    assert meta, names


def _dependency_paths() -> list[str]:
    """Where this test run's interpreter finds the dependencies (iree, numpy, flatbuffers, ...)."""
    import sysconfig
    paths = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    return sorted(p for p in paths if p and os.path.isdir(p))


def test_fresh_venv_runs_sample_outside_repo(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    # NOTE: an isolated venv (no system site packages: a clean machine's base interpreter has no
    # iree, numpy or flatbuffers). The dependencies come from the interpreter running the tests,
    # through a .pth file, which site.py appends after the venv's own site-packages; the project
    # itself comes only from the wheel installed there, so that copy is the one imported.
    venv.EnvBuilder(system_site_packages=False, with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    site_dir = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site_dir, "zz_test_dependencies.pth"), "w") as f:
        f.write("\n".join(_dependency_paths()) + "\n")
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True, capture_output=True)
    sample = os.path.join(REPO, "samples", "serialized_matmul.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([py, "-c", "import hipdnn_iree, lowering; print(hipdnn_iree.__file__); print(lowering.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, env=env, check=True).stdout.split()
    assert all(str(env_dir) in w for w in where), where
    p = subprocess.run([py, sample], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "PASS" in p.stdout, p.stdout + p.stderr
