"""The one table from the graph IR's error (``graph_ir.desc.GraphError``) to a hipDNN status.

A ``GraphError`` says what is wrong with a graph (``kind``: invalid, unsupported, internal); which
status the caller gets also depends on where the graph came from (``origin``):

- ``"graph"``: the caller's own graph, call or buffers (``hd.Graph``, a build, an execute). A wrong
  graph is the caller's parameter: ``BAD_PARAM``.
- ``"plan"``: a stored plan or plugin payload being restored or described. A payload the plugin
  refuses is ``PLUGIN_ERROR`` (../shared/design/API.md: "plugin refuses the payload -> PLUGIN_ERROR").

Either way a valid graph this engine cannot handle is ``NOT_SUPPORTED`` and a defect of this
project is ``INTERNAL_ERROR``. Every ``except GraphError`` that reports a status goes through
:func:`to_hipdnn` (tests/test_error_statuses.py checks it).
"""
from __future__ import annotations

from graph_ir.desc import GraphError
from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

ORIGINS = ("graph", "plan")

STATUS_BY_ORIGIN: dict[str, dict[str, Status]] = {
    "graph": {"invalid": Status.BAD_PARAM, "unsupported": Status.NOT_SUPPORTED,
              "internal": Status.INTERNAL_ERROR},
    "plan": {"invalid": Status.PLUGIN_ERROR, "unsupported": Status.NOT_SUPPORTED,
             "internal": Status.INTERNAL_ERROR},
}


def status_for(err: GraphError, origin: str) -> Status:
    """The status of ``err`` coming from ``origin`` (``"graph"`` or ``"plan"``)."""
    if origin not in STATUS_BY_ORIGIN:
        raise ValueError(f"GraphError origin must be one of {ORIGINS}, got {origin!r}")
    return STATUS_BY_ORIGIN[origin][err.kind]


def to_hipdnn(err: GraphError, origin: str, prefix: str = "") -> HipdnnError:
    """The ``HipdnnError`` reporting ``err``: status by :data:`STATUS_BY_ORIGIN`, message
    ``prefix + str(err)``. Raise it ``from None`` (the GraphError adds nothing the message lacks).

    Example:
        >>> e = to_hipdnn(GraphError("tensor 'X': dims must be positive"), "graph", "validate: ")
        >>> e.status.name, e.message
        ('BAD_PARAM', "validate: tensor 'X': dims must be positive")
    """
    return HipdnnError(status_for(err, origin), prefix + str(err))
