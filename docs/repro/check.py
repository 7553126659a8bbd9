"""Inputs and expected results for the reproducers in this folder (numpy only; no hipdnn-iree).

    python check.py inputs DIR            # writes DIR/{mm,conv,dgrad}_*.npy (seeded)
    python check.py compare DIR           # compares DIR/*_out.npy (from iree-run-module) with float64 numpy

See docs/known_issues.md for the iree-compile and iree-run-module commands.
"""
import os
import sys

import numpy as np


def inputs(d):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(f"{d}/mm_x.npy", rng.uniform(-1, 1, (16, 16)).astype(np.float16))
    np.save(f"{d}/mm_w.npy", (rng.uniform(-1, 1, (16, 16)) / 4).astype(np.float16))
    np.save(f"{d}/conv_x.npy", rng.uniform(-1, 1, (1, 16, 16, 32)).astype(np.float16))          # NHWC
    np.save(f"{d}/conv_w.npy", (rng.uniform(-1, 1, (64, 3, 3, 32)) / 17).astype(np.float16))   # KRSC
    np.save(f"{d}/dgrad_dy.npy", rng.uniform(-1, 1, (4, 64, 14, 14)).astype(np.float16))       # NCHW
    np.save(f"{d}/dgrad_w.npy", (rng.uniform(-1, 1, (64, 32, 3, 3)) / 17).astype(np.float16))  # KCRS


def conv2d_nchw(x, w, pad):
    """Cross-correlation, stride 1: x [N, C, H, W], w [K, C, R, S]."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))   # N C H W R S
    return np.einsum("nchwrs,kcrs->nkhw", win, w)


def dgrad_s2(dy, w):
    """dx of a stride-2, pad-1, 3x3 convolution whose output was dy (dx is [N, C, 28, 28])."""
    n, k, ho, wo = dy.shape
    dx = np.zeros((n, w.shape[1], 2 * ho + 2, 2 * wo + 2))
    for r in range(3):
        for s in range(3):
            dx[:, :, r:r + 2 * ho:2, s:s + 2 * wo:2] += np.einsum("nkhw,kc->nchw", dy, w[:, :, r, s])
    return dx[:, :, 1:1 + 2 * ho, 1:1 + 2 * wo]


def expected(d):
    ld = lambda n: np.load(f"{d}/{n}.npy").astype(np.float64)
    x, w = ld("mm_x"), ld("mm_w")
    conv = conv2d_nchw(ld("conv_x").transpose(0, 3, 1, 2), ld("conv_w").transpose(0, 3, 1, 2), 1).transpose(0, 2, 3, 1)
    return {"mm_n_before_m": (x @ w.T).T, "mm_m_before_n": x @ w.T, "conv_fprop_nchw": conv,
            "conv_dgrad_s2": dgrad_s2(ld("dgrad_dy"), ld("dgrad_w"))}


def compare(d):
    want = expected(d)
    for f in sorted(os.listdir(d)):
        if not f.endswith("_out.npy"):
            continue
        name = f[:-len("_out.npy")]
        key = next(k for k in want if name.startswith(k))
        got = np.load(f"{d}/{f}").astype(np.float64)
        ref = want[key]
        err = np.abs(got - ref)
        print(f"{name}: max |err| / max |ref| = {np.nanmax(err) / np.abs(ref).max():.3g}, "
              f"{np.count_nonzero(~(err <= 1e-2 * np.abs(ref).max()))} of {ref.size} elements off "
              f"({np.count_nonzero(np.isnan(got))} NaN)")
        if key == "mm_n_before_m" and ref.shape == (16, 16):
            # y[n, m] is the kernel's accumulator C[m, n] transposed; mma.sync m16n8k16 gives each lane
            # C[g, 2t], C[g, 2t+1], C[g+8, 2t], C[g+8, 2t+1] (c0..c3). Hypothesis: c1 and c2 trade places.
            swapped = ref.copy()
            swapped[1::2, 0:8], swapped[0::2, 8:16] = ref[0::2, 8:16], ref[1::2, 0:8]
            print(f"  against the expected result with c1/c2 swapped: max |err| = {np.abs(got - swapped).max():.3g}")
            print("  expected y[0:4, 0:3] =", np.round(ref[0:4, 0:3], 4).tolist())
            print("  obtained y[0:4, 0:3] =", np.round(got[0:4, 0:3], 4).tolist())

if __name__ == "__main__":
    {"inputs": inputs, "compare": compare}[sys.argv[1]](sys.argv[2])
