"""docs/cudnn_migration.md names every public name of hipdnn_iree.cudnn (module names, pygraph
methods, tensor methods); docs/api.md and the README point to it. The lists come from the code,
so a name added later fails here until it is documented."""
from __future__ import annotations

import os
import re

import hipdnn_iree.cudnn as cudnn
from harness import REPO


def _read(*parts) -> str:
    with open(os.path.join(REPO, *parts), encoding="utf-8") as f:
        return f.read()


def _spans(text: str) -> str:
    text = re.sub(r"```.*?```", "", text, flags=re.S)     # fenced blocks out; spans may wrap lines
    return "\n".join(re.findall(r"`([^`]+)`", text))


def undocumented(text: str) -> list[str]:
    spans = _spans(text)
    names = [n for n in cudnn.__all__ if n not in ("Handle", "tensor")]
    names += [n for n in dir(cudnn.pygraph) if not n.startswith("_") and n not in ("hd_graph",
                                                                                     "get_compiled_plan_tensors")]
    names += [n for n in dir(cudnn.tensor) if not n.startswith("_") and n != "set_is_pass_by_value"]
    return sorted({n for n in names if not re.search(rf"(?<![\w]){re.escape(n)}(?!\w)", spans)})


def test_migration_page_names_every_public_name():
    assert undocumented(_read("docs", "cudnn_migration.md")) == []


def test_the_checker_reports_a_missing_name():
    assert "conv_dgrad" in undocumented("`conv_fprop` only")


def test_api_reference_and_readme_point_to_the_facade():
    api = _read("docs", "api.md")
    assert "hipdnn_iree.cudnn" in api and "cudnn_migration.md" in api
    readme = _read("README.md")
    assert "hipdnn_iree.cudnn" in readme and "docs/cudnn_migration.md" in readme
