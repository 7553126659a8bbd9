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


def test_readme_layernorm_claim_is_the_forward_with_statistics():
    """layernorm's training support is the forward phase with mean/inv_variance; there is no backward."""
    import hipdnn_iree as hd
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    flat = " ".join(text.split())
    assert "(inference and training)" not in flat
    assert "training forward phase, which also outputs mean and inv_variance; no backward yet" in flat
    assert not any("backward" in n or n.endswith("_bwd") for n in dir(hd.Graph) if "norm" in n), \
        "hd.Graph has a norm backward now: update README's layernorm line"
    assert hd.NormFwdPhase.TRAINING   # the forward phase README names exists
