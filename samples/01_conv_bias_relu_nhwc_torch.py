"""Conv + bias + ReLU in NHWC, straight from PyTorch channels_last tensors.

1. Describe the tensors with PyTorch's own dims and strides: logical dims stay channels-first
   (N, C, H, W) and the NHWC layout lives in the strides, as in cuDNN and hipDNN.
2. Build conv_fprop -> ADD (bias, broadcast per channel) -> RELU_FWD. The output's strides are
   left unset: they follow the input's layout, so the result is NHWC too.
3. Serialize the compiled plan, write it to a file, read it back and restore it (no compiler).
4. Execute the restored plan on torch tensors (the output is written into the caller's tensor)
   and compare with torch's float64 conv2d + bias + relu.

Prints PASS and exits 0 when the results match; exits 1 otherwise. Runs on the CPU. Without
PyTorch (`pip install .` installs none) it prints one SKIP line and exits 0, having run nothing.
"""
from __future__ import annotations

import os
import sys
import tempfile

try:
    import torch
except ImportError:   # NOTE: `pip install .` installs no torch; this sample is about torch tensors
    print("SKIP: samples/01_conv_bias_relu_nhwc_torch.py needs PyTorch (pip install torch); nothing was run")
    sys.exit(0)

import hipdnn_iree as hd

X_UID, W_UID, B_UID, Y_UID = 1, 2, 3, 4
N, C, H, W = 2, 16, 14, 14          # input, logical NCHW
K, R, S = 32, 3, 3                  # filters
PAD, STRIDE = 1, 1
RTOL, ATOL = 1e-4, 1e-4             # float32 (tests/tolerances.py)


def build_graph(x: torch.Tensor, w: torch.Tensor) -> hd.Graph:
    g = hd.Graph(name="conv_bias_relu_nhwc", io_data_type=hd.DataType.FLOAT,
                 compute_data_type=hd.DataType.FLOAT)
    # torch's shape is the logical dims; torch's strides are the channels_last layout.
    tx = g.tensor(name="X", uid=X_UID, dim=list(x.shape), stride=list(x.stride()))
    tw = g.tensor(name="W", uid=W_UID, dim=list(w.shape), stride=list(w.stride()))
    # One bias per output channel: dims [1, K, 1, 1], broadcast over N, H, W.
    tb = g.tensor(name="bias", uid=B_UID, dim=[1, K, 1, 1])
    conv = g.conv_fprop(tx, tw, padding=[PAD, PAD], stride=[STRIDE, STRIDE], name="conv")
    biased = g.pointwise(conv, tb, mode=hd.PointwiseMode.ADD, name="bias_add")
    y = g.pointwise(biased, mode=hd.PointwiseMode.RELU_FWD, name="relu")
    y.set_output(True).set_uid(Y_UID).set_name("Y")
    return g


def main() -> int:
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W).to(memory_format=torch.channels_last)
    w = torch.randn(K, C, R, S).to(memory_format=torch.channels_last)    # KRSC in memory
    bias = torch.randn(1, K, 1, 1)

    handle = hd.create_handle()
    graph = build_graph(x, w)
    graph.build(handle)                      # validate ... build_plans: IREE compiles here

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "conv_bias_relu.plan")
        hd.save_plan(path, graph.serialize_compiled_plan())
        restored = hd.Graph.from_compiled_plan(handle, hd.load_plan(path))

    # The plan describes its own tensors: allocate the output from that description.
    out_desc = next(t for t in restored.get_compiled_plan_tensors() if t.uid == Y_UID)
    y = torch.empty(out_desc.dims).to(memory_format=torch.channels_last)
    if tuple(y.stride()) != out_desc.strides:
        print(f"FAIL: the plan's output strides {out_desc.strides} are not NHWC {tuple(y.stride())}")
        return 1
    print(f"output {out_desc.name}: dims {list(out_desc.dims)}, strides {list(out_desc.strides)} (NHWC)")

    restored.execute(handle, {X_UID: x, W_UID: w, B_UID: bias, Y_UID: y})

    ref = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), bias.double().flatten(),
                                                stride=STRIDE, padding=PAD))
    err = (y.double() - ref).abs()
    bound = ATOL + RTOL * ref.abs()
    print(f"max |hipdnn-iree - torch float64| = {err.max().item():.3e}")
    if not bool((err <= bound).all()):
        print("FAIL: result differs from torch")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
