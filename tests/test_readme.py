"""README's two commands are the ones CI and a new user run."""
import os
import re

from harness import REPO


def _readme_commands():
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    return re.findall(r"```\n(python3 -m venv .*?)\n```", text)


def test_readme_gives_exactly_two_commands_and_ci_runs_the_test_one():
    cmds = _readme_commands()
    assert len(cmds) == 2, cmds
    sample, tests = cmds
    assert "samples/" in sample and "pytest" in tests
    ci = open(os.path.join(REPO, ".ci", "run"), encoding="utf-8").read()
    assert f'"{tests}"' in ci, "CI must run README's test command verbatim"
    assert "env -i" in ci and "HIPDNN_IREE_CACHE_DIR" in ci


def test_readme_op_list_names_every_training_method():
    """README's op list names each training method hd.Graph has, and each exists."""
    import hipdnn_iree as hd
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    flat = " ".join(text.split())
    assert "(inference and training)" not in flat
    for name in ("batchnorm", "batchnorm_backward", "layernorm_backward", "rmsnorm_backward",
                 "sdpa_backward", "resample", "resample_backward"):
        assert hasattr(hd.Graph, name), name
        assert f"`{name}`" in flat, f"README's op list lacks {name}"
    assert not any(n.endswith("_bwd") for n in dir(hd.Graph)), "README names backward ops *_backward"
    assert hd.NormFwdPhase.TRAINING