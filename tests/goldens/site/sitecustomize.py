"""Registers the lowering's golden-recording sink (lowering/_goldens.py) in every Python process
started with this folder on ``PYTHONPATH`` (tests/goldens/record.py does that for its recording run,
so the samples and the other subprocesses the tests start are recorded too). Recording happens only
while ``HIPDNN_IREE_RECORD_GOLDENS`` names a file: it is read at each lowering, not here."""
import os
import sys
import types


def path():
    return os.environ.get("HIPDNN_IREE_RECORD_GOLDENS") or None


def test():
    """The pytest test running (its ``PYTEST_CURRENT_TEST``; a sample started by a test inherits it)."""
    return os.environ.get("PYTEST_CURRENT_TEST", "")


_sink = types.ModuleType("_hipdnn_iree_goldens_sink")
_sink.path = path
_sink.test = test
sys.modules[_sink.__name__] = _sink
