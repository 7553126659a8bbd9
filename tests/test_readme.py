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
