"""The backend layer (hipDNN's backend API in Python): handles and the plugin resource manager,
execution-plan descriptors and their attributes, the RFC 0009 envelope (encode, decode, validate),
plan files, plan inspection and the opt-in first-run self-check. It moves graphs to plugins as
FlatBuffer bytes and plans back as opaque payloads. May import: ``plugins``, ``plugin_sdk``,
``flatbuffers_sdk``; never the frontend.

``from hipdnn_iree import backend`` gives the public backend calls (``API.md``): the names below.
"""
from hipdnn_iree.backend.plan import (Attribute, EngineConfig, ExecutionPlanDescriptor, PlanTensor,  # noqa: F401
                                      build_execution_plan, create_and_deserialize_execution_plan, load_execution_plan,
                                      get_serialized_execution_plan, serialize_execution_plan)
