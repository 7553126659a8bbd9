"""Compiled-plan serialization, step by step (hipDNN RFC 0009's sample, in Python).

1. Build a matmul graph A[4x8] . B[8x5].
2. Build the compiled execution plan (IREE compiles it).
3. Serialize the compiled plan to bytes.
4. Deserialize it into a fresh Graph (no recompilation).
5. Execute the restored plan with UID bindings.
6. Validate the result against the numpy reference engine.

Runs on the CPU by default. ``--target rocm:gfx942 --out plan.bin`` compiles an AMD GPU plan
instead (no GPU needed) and writes it to a file; ``--out`` alone also writes the CPU plan.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import hipdnn_iree as hd

A_UID, B_UID, C_UID = 1, 2, 3
M, K, N = 4, 8, 5


def build_graph() -> hd.Graph:
    graph = hd.Graph(name="serialized_matmul", io_data_type=hd.DataType.FLOAT,
                     compute_data_type=hd.DataType.FLOAT)
    a = graph.tensor(name="A", uid=A_UID, dim=[M, K], stride=[K, 1])
    b = graph.tensor(name="B", uid=B_UID, dim=[K, N], stride=[N, 1])
    c = graph.matmul(a, b, name="matmul")
    c.set_output(True).set_uid(C_UID).set_name("C")
    return graph


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None, help="compile target, e.g. llvm-cpu, rocm:gfx942, cuda:sm_80")
    ap.add_argument("--out", default=None, help="write the serialized plan to this file")
    args = ap.parse_args(argv)

    gpu_only = args.target is not None and not args.target.startswith(("llvm-cpu", "cpu"))
    handle = (hd.create_handle(device=None, target=args.target) if gpu_only
              else hd.create_handle(target=args.target))
    print(f"handle: device={handle.device} target={handle.target}")

    # 1-2. Build the graph and its compiled plan.
    graph = build_graph()
    t0 = time.perf_counter()
    graph.validate()
    graph.build_operation_graph(handle)
    graph.create_execution_plans()
    graph.check_support()
    graph.build_plans()
    print(f"built plan with engine id {graph.get_execution_plan_engine_id()} in {time.perf_counter() - t0:.3f} s")

    # 3. Serialize.
    plan = graph.serialize_compiled_plan()
    print(f"serialized compiled plan: {len(plan)} bytes")
    if args.out:
        with open(args.out, "wb") as f:
            f.write(plan)
        print(f"wrote {args.out}")
    if gpu_only:
        print(f"plan compiled for {handle.target}; restore it on a matching GPU to execute")
        return 0

    # 4. Deserialize into a fresh Graph.
    t0 = time.perf_counter()
    restored = hd.Graph()
    restored.deserialize_compiled_plan(handle, plan)
    uids = restored.get_compiled_plan_tensor_uids()
    print(f"restored plan in {(time.perf_counter() - t0) * 1e3:.2f} ms; tensor uids {uids}")

    # 5. Execute with UID bindings; the output lands in the caller's array.
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    workspace = np.empty(restored.get_workspace_size(), np.uint8)
    restored.execute(handle, {A_UID: a, B_UID: b, C_UID: c}, workspace)

    # 6. Validate against the reference engine.
    reference = build_graph()
    reference.set_preferred_engine_id_ext("NUMPY_REFERENCE")
    reference.build(handle)
    expected = np.zeros_like(c)
    reference.execute(handle, {A_UID: a, B_UID: b, C_UID: expected})
    err = float(np.max(np.abs(c - expected)))
    ok = np.allclose(c, expected, rtol=1e-5, atol=1e-5)
    print(f"max |restored - reference| = {err:.3e}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except hd.HipdnnError as e:   # a bad --target or --out: say what was wrong, no traceback
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
