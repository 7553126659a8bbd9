"""What every layer and every plugin shares (hipDNN's plugin SDK): the error type and status
codes (``status``), the one GraphError -> status table (``errors``), the public enums
(``types``), engine ids (``engine_ids``), the variant-pack checks that turn caller buffers into
dense views (``buffers``) and the package version. May import: ``flatbuffers_sdk`` and
``graph_ir`` (the graph schema's enum values, GraphError); nothing above it.
"""
