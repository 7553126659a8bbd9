"""Writes one frozen corpus plan (+ its inputs and expected outputs) for the compatibility tests.

Usage: python tests/data/make_corpus.py NAME [ENVELOPE_VERSION] [--targets a,b,...]
  (e.g. plan_v1_fusplan11_cpu; with --targets, a several-target plan: FUSPLAN kind 3)
Refuses to overwrite an existing file: the corpus is frozen. A new format version gets a NEW name;
old files stay and must keep loading (tests/test_compat_corpus.py).
The CPU target is generic x86-64 so the plans run on any x86-64 machine.
"""
import os
import sys

import numpy as np

import hipdnn_iree as hd

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = "llvm-cpu:x86-64"


def build():
    g = hd.Graph(name="corpus_mlp", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="X", uid=1, dim=[2, 6, 16])
    w = g.tensor(name="W", uid=2, dim=[1, 16, 12], stride=[192, 1, 16])
    b = g.tensor(name="bias", uid=3, dim=[1, 1, 12])
    y = g.pointwise(g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.GELU_FWD)
    y.set_output(True).set_uid(4)
    return g


def main(name: str, envelope_version: int | None = None, targets: list[str] | None = None) -> None:
    plan_path, data_path = os.path.join(HERE, name + ".plan"), os.path.join(HERE, name + ".npz")
    for p in (plan_path, data_path):
        if os.path.exists(p):
            raise SystemExit(f"{p} exists: the corpus is frozen; pick a new name")
    h = hd.create_handle(target=TARGET)
    g = build()
    g.build(hd.create_handle(target=targets) if targets else h)
    kwargs = {} if envelope_version is None else {"_envelope_version": envelope_version}
    plan = g.serialize_compiled_plan(**kwargs)
    rng = np.random.default_rng(2026)
    x = rng.standard_normal((2, 6, 16), dtype=np.float32)
    w = rng.standard_normal((1, 12, 16), dtype=np.float32).transpose(0, 2, 1)
    b = rng.standard_normal((1, 1, 12), dtype=np.float32)
    ref = build()
    ref.set_preferred_engine_id_ext("NUMPY_REFERENCE")
    ref.build(h)
    y = np.zeros((2, 6, 12), np.float32)
    ref.execute(h, {1: x, 2: w, 3: b, 4: y})
    with open(plan_path, "wb") as f:
        f.write(plan)
    np.savez(data_path, x=x, w_memory=np.ascontiguousarray(w.transpose(0, 2, 1)), b=b, y=y,
             hipdnn_iree_version=hd.__version__)
    print(f"wrote {plan_path} ({len(plan)} bytes) and {data_path}")


if __name__ == "__main__":
    argv = sys.argv[1:]
    targets = None
    if "--targets" in argv:
        i = argv.index("--targets")
        targets = argv[i + 1].split(",")
        del argv[i:i + 2]
    main(argv[0], int(argv[1]) if len(argv) > 1 else None, targets)
