"""Engine plugins shipped with hipdnn-iree (found through the ``hipdnn_iree.engine_plugins``
entry point group)."""
