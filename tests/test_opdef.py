"""One OpDef per op kind (graph_ir/opdef.py): the registry is complete, and each layer's import-time
check names a supported op that lacks its piece."""
import contextlib

import pytest

import hipdnn_iree as hd
from graph_ir.desc import ATTRS_BY_KIND, LOWERED_KINDS, OpKind
from graph_ir.opdef import OPS, TRAITS, OpDef, check_complete, register, traits_of

FAKE = OpKind.CUSTOM_OP     # any kind: for the block below it is a supported op that no layer has a piece for


@contextlib.contextmanager
def _fake_supported_op():
    """For the block, FAKE's OpDef is a throwaway supported one whose hd.Graph method does not exist,
    and FAKE has no emitter and no reference: each layer's check must name it. Everything is put
    back after."""
    from hipdnn_iree.plugins.numpy_reference.registry import REFERENCES
    from lowering._registry import LOWERINGS
    original = OPS.pop(FAKE)
    pieces = [(table, table.pop(FAKE, None)) for table in (LOWERINGS, REFERENCES)]
    try:
        register(OpDef(FAKE, ATTRS_BY_KIND[FAKE], infer=lambda node, dims: {}, dynamic=lambda f, node: None,
                       frontend_method="resample_fwd_that_does_not_exist"))
        yield
    finally:
        OPS[FAKE] = original
        for table, piece in pieces:
            if piece is not None:
                table[FAKE] = piece
    assert OPS[FAKE] is original


def test_every_op_kind_has_one_opdef():
    assert set(OPS) == set(OpKind)
    assert {k for k, d in OPS.items() if d.supported} == set(LOWERED_KINDS)
    for k, d in OPS.items():
        assert d.kind == k and d.attrs is ATTRS_BY_KIND[k]
        assert d.traits <= TRAITS
        if d.supported:
            assert d.dynamic is not None and callable(getattr(hd.Graph, d.frontend_method))
        else:
            assert d.dynamic is None and d.frontend_method is None and not d.facade_methods


def test_register_refuses_a_duplicate():
    with pytest.raises(RuntimeError, match="duplicate OpDef for MATMUL"):
        register(OPS[OpKind.MATMUL])


def test_a_supported_opdef_needs_its_dynamic_rule_and_method():
    with pytest.raises(TypeError, match="CUSTOM_OP"):
        OpDef(FAKE, ATTRS_BY_KIND[FAKE], infer=lambda n, d: {})
    with pytest.raises(TypeError, match="attributes class"):
        OpDef(FAKE, ATTRS_BY_KIND[OpKind.MATMUL], infer=lambda n, d: {}, supported=False)
    with pytest.raises(TypeError, match="traits"):
        OpDef(FAKE, ATTRS_BY_KIND[FAKE], infer=lambda n, d: {}, supported=False, traits=frozenset({"nope"}))


def test_check_complete_names_every_missing_op():
    with pytest.raises(RuntimeError, match=r"^table: no entry for the supported op kind\(s\) .*MATMUL.*SDPA"):
        check_complete("table", {})
    check_complete("table", {k: None for k in LOWERED_KINDS})


@pytest.mark.parametrize("layer", ["lowering", "numpy_reference", "frontend"])
def test_each_layer_check_names_a_missing_op(layer):
    from hipdnn_iree.frontend.ops.registry import check_frontend
    from hipdnn_iree.plugins.numpy_reference.registry import check_references
    from lowering._registry import check_lowerings
    check = {"lowering": check_lowerings, "numpy_reference": check_references,
             "frontend": lambda: check_frontend(hd.Graph)}[layer]
    check()                                  # complete as shipped
    with _fake_supported_op():
        with pytest.raises(RuntimeError, match=FAKE.name):
            check()
    check()                                  # and again once the fake is gone


def test_facade_methods_are_pygraph_methods():
    from hipdnn_iree import cudnn
    from hipdnn_iree.cudnn._graph import NOT_SUPPORTED_METHODS
    from hipdnn_iree.cudnn._ops import _BACKWARD, _BINARY_01, _BINARY_AB, _CMP, _UNARY
    for d in OPS.values():
        for m in d.facade_methods:
            assert callable(getattr(cudnn.pygraph, m, None)) and m not in NOT_SUPPORTED_METHODS, (d.kind.name, m)
    pointwise = set(OPS[OpKind.POINTWISE].facade_methods)
    for table in (_UNARY, _BINARY_AB, _BINARY_01, _CMP, _BACKWARD):
        assert set(table) <= pointwise


def test_knob_traits_say_what_the_kinds_said():
    """knobs.py reads traits; each trait it reads is held by exactly the kinds it tested before."""
    held = {t: {k for k, d in OPS.items() if t in d.traits} for t in TRAITS}
    assert held["attention"] == {OpKind.SDPA, OpKind.SDPA_BACKWARD}
    assert held["contraction"] == {OpKind.MATMUL}
    assert held["conv"] == {OpKind.CONV_FPROP, OpKind.CONV_DGRAD, OpKind.CONV_WGRAD}
    for k in ("conv_fprop", "conv_dgrad", "conv_wgrad"):
        assert held[k] == {OpKind[k.upper()]}
    assert traits_of([OpKind.SDPA, OpKind.MATMUL]) == {"attention", "contraction"}
