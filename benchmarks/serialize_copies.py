"""What copying the ``.vmfb`` once instead of four times saves when a plan is serialized.

Two ways to turn one compiled module into the version-1 envelope, timed interleaved:

- ``before``: what hipdnn-iree did before issue 19 item 5: ``fusplan.pack`` joins header and
  module into one bytes, a FlatBuffers builder copies that payload in, ``Output()`` slices it
  out, ``bytes()`` copies it again (4 copies of the module);
- ``after``: what ``serialize_compiled_plan`` does now: ``fusplan.pack_parts`` (header + the
  module's own buffer) and ``envelope.encode`` joining the envelope around them (1 copy).

Both give the same bytes (checked). The module is a real one (a 64x64 matmul built on the CPU)
and, for the large cases, that module's bytes repeated to 1, 16 and 64 MB (the serializer never
reads inside the module; plans of that size come from large graphs and multi-target builds).
Medians, min and max over the rounds after one warm-up round.

    python benchmarks/serialize_copies.py [--rounds 15] [--out docs/benchmarks/serialize_copies.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import flatbuffers

import hipdnn_iree as hd
from hipdnn_iree.backend import envelope as E
from hipdnn_iree.plugins.iree_linalg import fusplan as F


def _builder_envelope(env) -> bytes:
    """The version-1 envelope as encode wrote it before: the payload copied into a builder."""
    payload = bytes(env.plugin_payload)
    b = flatbuffers.Builder(len(payload) + 1024)
    p = E._aligned_bytes(b, payload)
    u = E._uids(b, env.tensor_uids)
    b.StartObject(5)
    b.PrependUint32Slot(0, env.version, 0)
    b.PrependInt64Slot(1, env.engine_id, 0)
    b.PrependInt64Slot(2, env.workspace_size, 0)
    b.PrependUOffsetTRelativeSlot(3, u, 0)
    b.PrependUOffsetTRelativeSlot(4, p, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def _meta():
    return F.Metadata(plugin_name="hipdnn_iree.iree_linalg", plugin_version="bench", producer_version="bench",
                      compiler_version="bench", target_device="llvm-cpu", target_arch="llvm-cpu:host",
                      engine_name="IREE_LINALG", engine_knobs="{}")


UIDS = (1, 2, 3)
ENV = F.envelope_fields(1, 0, UIDS)


def before(vmfb: bytes) -> bytes:
    payload = F.pack(vmfb, F.KIND_IREE_VMFB, _meta(), None, ENV)
    return _builder_envelope(E.Envelope(1, 1, 0, UIDS, payload))


def after(vmfb: bytes) -> bytes:
    parts = F.pack_parts([vmfb], F.KIND_IREE_VMFB, _meta(), None, ENV)
    return E.encode(E.Envelope(1, 1, 0, UIDS, parts))


def real_module() -> bytes:
    h = hd.create_handle(cache=False)
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x, w = g.tensor(uid=1, dim=[64, 64]), g.tensor(uid=2, dim=[64, 64])
    g.matmul(x, w).set_output(True).set_uid(3)
    g.build(h)
    return bytes(g._require_plan("bench").context.vmfb)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    module = real_module()
    cases = {"real module": module}
    for mb in (1, 16, 64):
        n = mb << 20
        cases[f"{mb} MB"] = (module * (n // len(module) + 1))[:n]
    times = {(c, m): [] for c in cases for m in ("before", "after")}
    for c, vmfb in cases.items():
        assert before(vmfb) == after(vmfb), c
    for r in range(args.rounds + 1):
        for c, vmfb in cases.items():
            for name, fn in (("before", before), ("after", after)) if r % 2 else (("after", after), ("before", before)):
                t0 = time.perf_counter()
                fn(vmfb)
                dt = time.perf_counter() - t0
                if r:
                    times[(c, name)].append(dt * 1e3)
    lines = ["# Serializing a plan: the .vmfb copied once instead of four times", "",
             f"`python benchmarks/serialize_copies.py --rounds {args.rounds}` on {platform.node() or 'this machine'} "
             f"({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, Python {platform.python_version()}): "
             "module -> FUSPLAN -> version-1 envelope, before (4 copies) and after (1 copy), "
             f"interleaved, {args.rounds} rounds after a warm-up; ms, median (min-max). Same bytes both ways.", "",
             "| module | plan bytes | before | after | after/before |", "|---|---:|---:|---:|---:|"]
    for c, vmfb in cases.items():
        b, a = times[(c, "before")], times[(c, "after")]
        mb, ma = statistics.median(b), statistics.median(a)
        lines.append(f"| {c} | {len(after(vmfb))} | {mb:.3f} ({min(b):.3f}-{max(b):.3f}) | "
                     f"{ma:.3f} ({min(a):.3f}-{max(a):.3f}) | {ma / mb:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
