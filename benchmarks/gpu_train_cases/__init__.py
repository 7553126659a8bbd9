"""Training-graph cases for benchmarks/gpu_training.py: one module per op family, each defining
``@case`` functions (``benchmarks/gpu_cases.py``'s contract: ``case(dt) -> (graph, refs)``, refs
computed by torch autograd in float64 from the same inputs)."""
