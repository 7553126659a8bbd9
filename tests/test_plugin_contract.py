"""The plugin contract as written: ``plugin_sdk/contract.py`` states the methods
and signatures every installed plugin implements, a plugin is checked against it when it is loaded,
and every call into a plugin goes through one wrapper (a stray exception becomes PLUGIN_ERROR
naming the plugin and the method; HipdnnError passes unchanged)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.backend.engines import ENTRY_POINT_GROUP, discover_plugins
from hipdnn_iree.plugin_sdk import contract
from hipdnn_iree.plugins.numpy_reference import NumpyReferencePlugin
from harness import random_array, raises

S = hd.Status
INSTALLED = discover_plugins()


def _shape(sig: inspect.Signature) -> list[tuple]:
    return [(p.name, p.kind.name, p.default) for p in sig.parameters.values()]


def _contract_signature(method: str) -> inspect.Signature:
    """The contract's full signature of ``method``, read from its Protocol (without ``self``)."""
    sig = inspect.signature(getattr(contract.METHODS[method], method))
    return sig.replace(parameters=list(sig.parameters.values())[1:])


@pytest.mark.parametrize("plugin", INSTALLED, ids=contract.plugin_name)
def test_every_contract_method_matches_each_installed_plugin(plugin):
    caps = contract.check_plugin(plugin).capabilities
    mismatches = []
    for method, protocol in contract.METHODS.items():
        group = next((c for c, p in contract.CAPABILITIES.items() if p is protocol), None)
        if group is not None and group not in caps:
            assert not callable(getattr(plugin, method, None)), \
                f"{contract.plugin_name(plugin)} implements {method} but does not declare '{group}'"
            continue
        want = contract.expected_signature(method, caps)
        got = inspect.signature(getattr(plugin, method))
        if _shape(got) != _shape(want):
            mismatches.append(f"{contract.plugin_name(plugin)}.{method}{got} != contract {method}{want}")
        # with every capability declared, the expected signature is the Protocol's own
        if set(caps) == set(contract.CAPABILITIES):
            assert _shape(want) == _shape(_contract_signature(method)), method
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize("plugin", INSTALLED, ids=contract.plugin_name)
def test_installed_plugins_have_no_public_method_outside_the_contract(plugin):
    extra = [n for n in dir(plugin) if not n.startswith("_") and callable(getattr(plugin, n))
             and n not in contract.METHODS]
    assert not extra, f"{contract.plugin_name(plugin)} has methods the contract does not state: {extra}"


def test_the_contract_tables_agree():
    assert set(contract.REQUIRED_METHODS) == {"get_all_engine_ids", "get_applicable_engine_ids", "get_workspace_size",
                                              "create_execution_context", "destroy_execution_context",
                                              "execute_op_graph"}
    for (method, param), cap in contract.CONDITIONAL_PARAMETERS.items():
        assert cap in contract.CAPABILITIES and param in _contract_signature(method).parameters, (method, param)
    for method in contract.SESSION_METHODS:
        assert "session" in _contract_signature(method).parameters, method
        assert "session" not in contract.expected_signature(method, ()).parameters, method
    for cap, needs in contract.CAPABILITY_NEEDS.items():
        assert cap in contract.CAPABILITIES and needs <= set(contract.CAPABILITIES)
    assert ENTRY_POINT_GROUP == "hipdnn_iree.engine_plugins"


# -- a tiny plugin of our own ---------------------------------------------------------------

class Tiny:
    """The reference engine under another id, with serialization hooks; ``fail`` names the methods
    that raise a stray (non-HipdnnError) exception."""

    name, version = "tiny", "1"
    capabilities = frozenset({"serialization"})
    ENGINE = hd.engine_id_from_name("TINY_ENGINE")
    engine_names = {ENGINE: "TINY_ENGINE"}

    def __init__(self, fail=()):
        self.inner = NumpyReferencePlugin()
        self.fail = set(fail)

    def _maybe_fail(self, method):
        if method in self.fail:
            raise KeyError(f"{method} went wrong")

    def get_all_engine_ids(self):
        return [self.ENGINE]

    def get_applicable_engine_ids(self, op_graph):
        return [self.ENGINE] if self.inner.get_applicable_engine_ids(op_graph) else []

    def get_workspace_size(self, engine_id, op_graph):
        return 0

    def create_execution_context(self, engine_id, op_graph, engine_config=None):
        self._maybe_fail("create_execution_context")
        return self.inner.create_execution_context(self.inner.get_all_engine_ids()[0], op_graph, engine_config)

    def destroy_execution_context(self, ctx):
        pass

    def execute_op_graph(self, ctx, variant_pack, workspace=None):
        self._maybe_fail("execute_op_graph")
        if "execute_hipdnn_error" in self.fail:
            raise hd.HipdnnError(S.EXECUTION_FAILED, "tiny: its own status")
        self.inner.execute_op_graph(ctx, variant_pack, workspace)

    def serialize_execution_context(self, ctx, engine_config=None):
        self._maybe_fail("serialize_execution_context")
        return b"tiny payload"

    def destroy_serialized_execution_context(self, serialized):
        self._maybe_fail("destroy_serialized_execution_context")

    def create_execution_context_from_serialized(self, serialized):
        raise hd.HipdnnError(S.NOT_SUPPORTED, "tiny restores nothing")


def _matmul(h):
    g = hd.Graph(name="mm", io_data_type=hd.DataType.FLOAT)
    a, b = g.tensor(name="A", uid=1, dim=[4, 8]), g.tensor(name="B", uid=2, dim=[8, 5])
    g.matmul(a, b).set_output(True).set_uid(3)
    return g.build(h)


def _pack(rng):
    return {1: random_array([4, 8], rng=rng), 2: random_array([8, 5], rng=rng), 3: np.zeros((4, 5), np.float32)}


def test_the_tiny_plugin_meets_the_contract_and_runs(rng):
    h = hd.create_handle(engine_plugins=[Tiny()])
    g = _matmul(h)
    assert g.get_execution_plan_engine_id() == Tiny.ENGINE
    pack = _pack(rng)
    g.execute(h, pack)
    np.testing.assert_allclose(pack[3], pack[1] @ pack[2], rtol=1e-5, atol=1e-5)
    assert len(g.serialize_compiled_plan()) > len(b"tiny payload")


def test_a_stray_exception_from_execute_is_plugin_error_naming_plugin_and_method(rng):
    h = hd.create_handle(engine_plugins=[Tiny(fail={"execute_op_graph"})])
    g = _matmul(h)
    e = raises(S.PLUGIN_ERROR, g.execute, h, _pack(rng))
    assert "engine plugin tiny failed in execute_op_graph: KeyError" in str(e) and "went wrong" in str(e), str(e)


def test_a_hipdnn_error_from_execute_passes_unchanged(rng):
    h = hd.create_handle(engine_plugins=[Tiny(fail={"execute_hipdnn_error"})])
    g = _matmul(h)
    raises(S.EXECUTION_FAILED, g.execute, h, _pack(rng), match="tiny: its own status")


def test_a_stray_exception_from_serialize_is_plugin_error_naming_plugin_and_method():
    h = hd.create_handle(engine_plugins=[Tiny(fail={"serialize_execution_context"})])
    g = _matmul(h)
    e = raises(S.PLUGIN_ERROR, g.serialize_compiled_plan)
    assert "engine plugin tiny failed in serialize_execution_context: KeyError" in str(e), str(e)
    h2 = hd.create_handle(engine_plugins=[Tiny(fail={"destroy_serialized_execution_context"})])
    e = raises(S.PLUGIN_ERROR, _matmul(h2).serialize_compiled_plan)
    assert "failed in destroy_serialized_execution_context" in str(e), str(e)


def test_a_stray_exception_from_build_is_plugin_error():
    h = hd.create_handle(engine_plugins=[Tiny(fail={"create_execution_context"})])
    with pytest.raises(hd.HipdnnError) as ei:
        _matmul(h)
    assert "engine plugin tiny failed in create_execution_context" in str(ei.value), str(ei.value)


# -- the load-time check ----------------------------------------------------------------------

def _plugin(**attrs):
    return type("Custom", (Tiny,), attrs)()


@pytest.mark.parametrize("attrs,match", [
    (dict(capabilities=frozenset({"serialization", "description"})),
     "method of capability 'description' describe_payload is missing"),
    (dict(capabilities=frozenset({"serialization", "sessions"})),
     "required method get_applicable_engine_ids has signature (op_graph), the contract's is (op_graph, session=None)"),
    (dict(capabilities=frozenset({"teleport"})), "unknown capability(ies) ['teleport']"),
    (dict(capabilities=frozenset({"plan_info"})), "declares capability 'plan_info' without ['serialization']"),
    (dict(capabilities=frozenset({"dynamic_shapes", "serialization"})),
     "required method create_execution_context has signature (engine_id, op_graph, engine_config=None), the "
     "contract's is (engine_id, op_graph, engine_config=None, dynamic=None)"),
    (dict(capabilities=frozenset({"serialization", "plan_info"})),
     "method of capability 'serialization' serialize_execution_context has signature (ctx, engine_config=None)"),
    (dict(execute_op_graph=lambda self, ctx, variant_pack, workspace: None),
     "required method execute_op_graph has signature (ctx, variant_pack, workspace), the contract's is "
     "(ctx, variant_pack, workspace=None)"),
    (dict(get_workspace_size=lambda self, engine_id, graph: 0), "required method get_workspace_size"),
    (dict(capabilities="serialization"), "capabilities must be a set of names"),
    (dict(engine_names=[1]), "engine_names must be a dict"),
])
def test_a_plugin_breaking_its_declared_contract_is_rejected_at_load(attrs, match):
    e = raises(S.PLUGIN_ERROR, lambda: hd.create_handle(engine_plugins=[_plugin(**attrs)]))
    assert "engine plugin tiny" in str(e) and match in str(e), str(e)


def test_a_plugin_without_capabilities_implements_only_the_required_methods(rng):
    p = _plugin(capabilities=frozenset())
    h = hd.create_handle(engine_plugins=[p])
    g = _matmul(h)
    raises(S.NOT_SUPPORTED, g.serialize_compiled_plan, match="does not support compiled-plan serialization")
    pack = _pack(rng)
    g.execute(h, pack)
    np.testing.assert_allclose(pack[3], pack[1] @ pack[2], rtol=1e-5, atol=1e-5)
