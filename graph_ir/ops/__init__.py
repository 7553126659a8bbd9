"""Per-op-family shape and attribute rules of the graph IR, shared by the frontend, the dynamic-shape
analysis and the MLIR emitters (which import them from here)."""
