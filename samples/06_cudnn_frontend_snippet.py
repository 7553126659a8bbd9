"""A cuDNN frontend Python snippet, unchanged, on the CPU; then an AMD GPU plan from the same code.

The snippet below is written against cuDNN FE's Python API (``cudnn.pygraph``, keyword names
``image=``/``weight=``/``input=``/``bias=``, ``create_execution_plans([heur_mode...])``, a
``{tensor: torch tensor}`` variant pack). It runs here with ``cudnn`` being
``hipdnn_iree.cudnn``:

1. On the CPU with torch CPU tensors (NHWC via ``channels_last``), checked against torch.
2. With a compile-only handle for an MI300 (``rocm:gfx942``): the same snippet builds the graph,
   and ``serialize()`` writes the AMD plan (``--out``, default a temporary file), which a machine
   with that GPU restores with ``pygraph().deserialize(handle, data)`` without compiling.

Prints PASS and exits 0 when the CPU result matches torch and the plan is written. Without PyTorch
(`pip install .` installs none) it prints one SKIP line and exits 0, having run nothing.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

try:
    import torch
except ImportError:   # NOTE: `pip install .` installs no torch; this sample is about torch tensors
    print("SKIP: samples/06_cudnn_frontend_snippet.py needs PyTorch (pip install torch); nothing was run")
    sys.exit(0)

import hipdnn_iree.cudnn as cudnn

# ---- the cuDNN FE snippet (as written for cuDNN; nothing in it names this project) -------------
SNIPPET = """
graph = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
X = graph.tensor(name="X", dim=X_gpu.size(), stride=X_gpu.stride(), data_type=X_gpu.dtype)
W = graph.tensor(name="W", dim=W_gpu.size(), stride=W_gpu.stride(), data_type=W_gpu.dtype)
B = graph.tensor(name="B", dim=B_gpu.size(), stride=B_gpu.stride(), data_type=B_gpu.dtype)
conv_output = graph.conv_fprop(image=X, weight=W, padding=[1, 1], stride=[2, 2], dilation=[1, 1])
bias_output = graph.bias(name="bias", input=conv_output, bias=B)
Y = graph.relu(name="relu", input=bias_output)
Y.set_output(True)
graph.validate()
graph.build_operation_graph()
graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
graph.check_support()
graph.build_plans()
"""
EXECUTE = """
workspace = torch.empty(graph.get_workspace_size(), device=X_gpu.device, dtype=torch.uint8)
graph.execute({X: X_gpu, W: W_gpu, B: B_gpu, Y: Y_actual}, workspace)
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="where to write the rocm:gfx942 plan")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    X_gpu = torch.randn(2, 8, 16, 16).to(memory_format=torch.channels_last)   # CPU tensors here
    W_gpu = torch.randn(16, 8, 3, 3).to(memory_format=torch.channels_last)
    B_gpu = torch.randn(1, 16, 1, 1).to(memory_format=torch.channels_last)
    expected = torch.relu(torch.nn.functional.conv2d(X_gpu, W_gpu, B_gpu.reshape(-1), padding=1, stride=2))

    # 1. the snippet on the CPU
    scope = {"cudnn": cudnn, "torch": torch, "handle": cudnn.create_handle(device="cpu"),
             "X_gpu": X_gpu, "W_gpu": W_gpu, "B_gpu": B_gpu, "Y_actual": torch.zeros_like(expected)}
    exec(SNIPPET, scope)
    exec(EXECUTE, scope)
    err = float((scope["Y_actual"] - expected).abs().max())
    ok = torch.allclose(scope["Y_actual"], expected, atol=1e-4, rtol=1e-4)
    print(f"CPU: conv + bias + ReLU (NHWC) through the cuDNN snippet, max abs error vs torch {err:.2e}")

    # 2. the same snippet for an AMD MI300, on a machine without one: build and serialize
    amd = dict(scope, handle=cudnn.create_handle(device=None, target="rocm:gfx942"))
    exec(SNIPPET, amd)
    data = amd["graph"].serialize()
    out = args.out or os.path.join(tempfile.mkdtemp(), "conv_bias_relu.gfx942.plan")
    with open(out, "wb") as f:
        f.write(bytes(data))
    print(f"AMD: wrote a rocm:gfx942 plan of {len(data)} bytes to {out}")
    ok = ok and len(data) > 0 and os.path.getsize(out) == len(data)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
