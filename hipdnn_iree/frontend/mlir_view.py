"""The MLIR a graph lowers to, as the IREE engine would compile it (``hipdnn-iree mlir``).

NOTE: the MLIR is the IREE engine's own artifact: its knob policy picks the forms (fused or composed
SDPA, conv layouts, ...). The frontend imports no engine package, so the engine's optional
``source_text`` plugin hook (``plugins/iree_linalg/build.source_text``) emits it with the same
arguments a build uses: the text shown is the text a build compiles.
"""
from __future__ import annotations

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

DEFAULT_TARGET = "llvm-cpu:host"


def graph_mlir(graph, target: str | None = None) -> str:
    """The MLIR text (linalg on tensors, verified) the IREE engine compiles for ``graph``.

    The graph is validated first when needed. Every knob is ``AUTO`` (the engine's built-in choice,
    plan 0 of ``HeurMode.A`` without a stored autotune result); a graph with dynamic or override
    shapes enabled gets the dynamic module a build would compile.

    Args:
        graph: an ``hd.Graph`` built from tensors and ops (not one restored from a compiled plan).
        target: ``"llvm-cpu"`` / ``"llvm-cpu:<cpu>"``, ``"rocm:<gfx>"``, ``"cuda:<sm>"``; default
            the CPU host target, ``llvm-cpu:host``. No device is needed for any of them.

    Returns:
        The module's text, which contains ``func.func @main``.

    Raises:
        HipdnnError: BAD_PARAM for an invalid graph or target, NOT_SUPPORTED for a graph restored
            from a compiled plan, an unknown backend, an op the engine does not lower, or no IREE
            compiler installed (the MLIR is verified with ``iree.compiler.ir``).

    Example:
        >>> import hipdnn_iree as hd
        >>> from hipdnn_iree.frontend.mlir_view import graph_mlir
        >>> g = hd.Graph(io_data_type=hd.DataType.FLOAT)
        >>> a, b = g.tensor(name="A", uid=1, dim=[4, 8]), g.tensor(name="B", uid=2, dim=[8, 2])
        >>> g.matmul(a, b).set_output(True).set_uid(3) is not None
        True
        >>> "linalg.matmul" in graph_mlir(g)                           # doctest: +SKIP
        True
    """
    # NOTE: no import of frontend.graph here (Graph.get_mlir calls this: an import cycle)
    if not callable(getattr(graph, "to_hipdnn_graph", None)) or not hasattr(graph, "_nodes"):
        raise HipdnnError(Status.BAD_PARAM, f"graph_mlir: expected an hd.Graph, got {type(graph).__name__}")
    if target is None:
        target = DEFAULT_TARGET
    if not isinstance(target, str):
        raise HipdnnError(Status.BAD_PARAM, f"graph_mlir: target must be one target string such as "
                                            f"'llvm-cpu:host' or 'rocm:gfx942', got {target!r}")
    # NOTE: the frontend imports no engine package: the engine that compiles (its optional
    # ``source_text`` hook) emits the text, through the installed plugins
    from hipdnn_iree.backend.engines import discover_plugins
    from hipdnn_iree.plugin_sdk.contract import declared_capabilities
    op_graph = graph.to_hipdnn_graph()        # validates first when needed; the bytes a build hands the engine
    for plugin in discover_plugins():
        if "source_text" in declared_capabilities(plugin):
            return plugin.source_text(op_graph, target, dynamic=graph._dynamic_request())
    raise HipdnnError(Status.NOT_SUPPORTED, "graph_mlir: no installed engine plugin emits source text (the IREE "
                                            "engine, hipdnn_iree.plugins.iree_linalg, does)")
