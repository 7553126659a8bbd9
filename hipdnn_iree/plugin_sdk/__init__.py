"""What every layer and every plugin shares (hipDNN's plugin SDK): the error type and status
codes (``status``), the public enums (``types``), engine ids (``engine_ids``), the variant-pack
checks that turn caller buffers into dense views (``buffers``) and the package version. May
import: ``flatbuffers_sdk`` and ``lowering`` (the graph schema's enum values); nothing above it.
"""
