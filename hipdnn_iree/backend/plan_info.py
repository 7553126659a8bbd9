"""What a plan file holds, read without a device or the compiler (``hipdnn-iree inspect``).

The backend reads its own layer, the envelope; the engine that wrote the payload describes the
rest through the plugin hook ``describe_payload`` (for IREE: the FUSPLAN header, metadata and
modules, ``plugins/iree_linalg/describe.py``). The backend imports no engine to do it.
"""
from __future__ import annotations

from hipdnn_iree.backend import envelope as _envelope
from hipdnn_iree.backend.engines import call_plugin, discover_plugins
from hipdnn_iree.plugin_sdk.contract import check_plugin
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status


def _plugins() -> list:
    """(plugin, declaration) of each installed plugin that meets the contract."""
    try:
        found = discover_plugins()
    except HipdnnError:
        return []   # NOTE: a broken third-party plugin must not stop inspecting a plan
    checked = []
    for p in found:
        try:
            checked.append((p, check_plugin(p)))
        except HipdnnError:
            pass    # NOTE: nor one that breaks the contract
    return checked


def engine_names(plugins=None) -> dict[int, str]:
    """engine id -> name for the installed plugins."""
    names = {}
    for p, declared in _plugins() if plugins is None else plugins:
        names.update(declared.engine_names)
    return names


def read_plan(data: bytes, verify_key=None):
    """Parses every layer of ``data``; a bad layer raises HipdnnError (BAD_PARAM/NOT_SUPPORTED/PLUGIN_ERROR).

    Returns the describing plugin's report (``as_dict()``, ``text()``)."""
    env = _envelope.decode(data, verify_key)
    plugins = _plugins()
    name = engine_names(plugins).get(env.engine_id, "unknown (no installed plugin serves it)")
    for p, declared in plugins:
        if "description" in declared.capabilities and env.engine_id in [int(e) for e in call_plugin(p, "get_all_engine_ids")]:
            return call_plugin(p, "describe_payload", env, len(data), name, env.layout == _envelope.LAYOUT_LEGACY_V2,
                               verify_key)
    raise HipdnnError(Status.NOT_SUPPORTED, f"no installed engine plugin describes plans of engine id "
                                            f"{env.engine_id} ({name})")


def format_text(info) -> str:
    """The human-readable report of ``hipdnn-iree inspect``."""
    return info.text()
