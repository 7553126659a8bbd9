"""The ``hipdnn-iree`` command line (``inspect``, ``run``, ``bench``, ``compile``, ``upgrade``,
``mlir``, ``cache``): a user of the public API and of the backend's plan inspection. ``main``
parses and dispatches, ``bench`` times restores and executions. May import anything below it.
"""
from hipdnn_iree.cli.main import main  # noqa: F401
