"""graph.fbs is the one source of the graph field tables (graph_ir/_fbs/graph_tables.py,
generated; tests/test_schemas.py checks it is fresh), and encoding did not change with it."""
import hashlib
import json

import pytest

from graph_ir._fbs import graph_generated as G
from graph_ir._fbs import graph_tables as T
from graph_ir.desc import ATTRS_BY_KIND, TABLE_NAMES, OpKind, encode_graph, schema_spec

# sha256 of encode_graph / of the sorted JSON dict of test_graph_json._desc_with_every_kind(v), taken
# with the hand-kept tables of graph_ir/desc.py before they were generated (commit 2e41222); re-taken when
# the training kinds got attributes classes: resample's modes are written by name (other sample values) and
# sdpa_backward's JSON keys follow sdpa's; with the earlier sample values the FlatBuffer bytes were unchanged
BEFORE = {
    0: ("74ec43389d4c0f7a8baffba86b93bd6cbaa515f72884c554ff7fd8a3f2fcbeb6",
        "3612c3d7bc9365282f700275e8da718b33e195e04759b9383db1c17068dc85f3"),
    1: ("ff4020f07483caa64faf3d4fa28f8545efced1e12a6b19c96938736105a1408b",
        "c217a03be944dde6a871d3af6b623e107312570613c6641256a77e2b1b5e9017"),
    2: ("160c2b23491b805711bd38ac4890d6b8684450a316f7a36d7e5d451fbaf717cf",
        "94977d1b5fac68a2394868d667a934fa40e8d5feb474993f62c9d343722baf43"),
    3: ("cb4fe0d7e4012eb3fb20bdd95c9fb9d1579b80eea57d5a065599f6a4558e2a10",
        "3698f12d3aa532abe889b06e73fdeb3d8ce55bffa1bfb38fa536b90a7d9d8e3e"),
}


@pytest.mark.parametrize("variant", sorted(BEFORE))
def test_every_op_kind_encodes_and_writes_json_as_before(variant):
    from hipdnn_iree.frontend import graph_json
    from test_graph_json import _desc_with_every_kind
    desc = _desc_with_every_kind(variant)
    got = (hashlib.sha256(encode_graph(desc)).hexdigest(),
           hashlib.sha256(json.dumps(graph_json.desc_to_dict(desc), sort_keys=True).encode()).hexdigest())
    assert got == BEFORE[variant]


def test_generated_tables_agree_with_flatc_code():
    assert [name for _, name in sorted(TABLE_NAMES.items())] == list(T.UNIONS["NodeAttributes"])
    for kind in OpKind:
        assert getattr(G.NodeAttributes, TABLE_NAMES[int(kind)]) == int(kind)
    for name, (_, members) in T.ENUMS.items():
        assert {m: v for m, v in members} == {k: v for k, v in vars(getattr(G, name)).items()
                                              if not k.startswith("_")}, name


def test_every_attrs_class_spec_is_its_schema_table():
    """Each op's SPEC is derived from its schema table: every field, in slot order, each once."""
    for kind, cls in ATTRS_BY_KIND.items():
        table = T.TABLES[TABLE_NAMES[int(kind)]]
        assert [f for f, _, _ in cls.SPEC] == [f for f, _, _ in table], kind
        assert cls.SPEC == schema_spec(kind, cls.RENAME)
        names = [a for _, a, _ in cls.SPEC]
        assert len(set(names)) == len(names)
        import dataclasses
        assert set(names) == {f.name for f in dataclasses.fields(cls)}, kind
        assert set(cls._IN) | set(cls._OUT) == {a for _, a, t in cls.SPEC if t in ("uid", "uid?")}, kind


def test_schema_parser_reads_a_new_op_table(tmp_path):
    """Adding an op: a new table in the schema comes out in the generated tables with its types."""
    import importlib.util
    import os
    from harness import REPO
    spec = importlib.util.spec_from_file_location("schema_generate", os.path.join(REPO, "schemas", "generate.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    parsed = gen.parse_schema("enum M : byte { A = 0, B, C = 5 }\n"
                              "table NewOpAttributes { x_tensor_uid: long; bias_tensor_uid: long = null; "
                              "k: [int]; m: M = B; eps: float = null; }  // a comment\n"
                              "union NodeAttributes { NewOpAttributes }")
    assert parsed["enums"]["M"] == {"base": "byte", "values": (("A", 0), ("B", 1), ("C", 5))}
    assert parsed["tables"]["NewOpAttributes"] == (("x_tensor_uid", "long", None), ("bias_tensor_uid", "long", "null"),
                                                   ("k", "[int]", None), ("m", "M", "B"), ("eps", "float", "null"))
