"""graph.fbs is the one source of the graph field tables (graph_ir/_fbs/graph_tables.py,
generated; tests/test_schemas.py checks it is fresh), and encoding did not change with it."""
import hashlib
import json

import pytest

from graph_ir._fbs import graph_generated as G
from graph_ir._fbs import graph_tables as T
from graph_ir.desc import ATTRS_BY_KIND, TABLE_NAMES, OpKind, encode_graph, schema_spec

# sha256 of encode_graph / of the sorted JSON dict of test_graph_json._desc_with_every_kind(v), taken
# with the hand-kept tables of graph_ir/desc.py before they were generated (commit 2e41222)
BEFORE = {
    0: ("ed5f5ba1221aba361f96aaea0a9b1d08a7009a4f266ac33c15428818e1026b34",
        "00a19e26e073df7c8b6350850a522cbf6edc5491f7c38b6e7f3e3eb2f150aaf8"),
    1: ("7981dbd04d98e645c8656b482d3733cea09243ec29cc0cdf6c644cb5a3c29091",
        "f1c9983b0fe4ba8ad8a05ed27d8ccdc958822bdd4f6cdf213f44f7d3c5690c8c"),
    2: ("a1d6667d213996958ada171b5f3b050d7f2134cfaf358ed8ab20692e14a1c7bb",
        "b0d6a31686c8da54610b522dc416cb541ca761552f7ff98bd19d2b0e09d40202"),
    3: ("9bee05e079f7026df777c651fd6f8035739cf9de2bb0bc93e532ffb01b5f822a",
        "89da6ff072b29f15059295b74233c2d45b5113b050bf9661f7ac694daac097ad"),
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
