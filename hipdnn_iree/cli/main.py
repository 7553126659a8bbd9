"""``hipdnn-iree``: inspect, run, benchmark and compile hipdnn-iree plan files.

Usage (``hipdnn-iree COMMAND --help`` for each)::

    hipdnn-iree inspect PLAN [--json]
    hipdnn-iree run PLAN --input UID=FILE.npy ... --output-dir DIR [--device local-task] [--json]
    hipdnn-iree bench PLAN [--device local-task] [-n 100]
    hipdnn-iree compile GRAPH.json [--target llvm-cpu:host] -o PLAN
    hipdnn-iree compile GRAPH.json... --target T... [--ray ADDRESS] [--store URL]
    hipdnn-iree fetch KEY --store URL --out PLAN
    hipdnn-iree mlir GRAPH [--target llvm-cpu:host]
    hipdnn-iree upgrade IN OUT [--target llvm-cpu:host]
    hipdnn-iree cache {info,clear} [--dir DIR] [--json]

Also ``python -m hipdnn_iree.cli``. Exit codes: 0 success; 1 the operation failed (compile
or execution error); 2 usage (bad arguments, missing or unreadable files, inputs that do
not fit the plan); 3 bad plan or graph file (damaged, unknown version, not a hipdnn-iree
plan); 4 device problem (device unavailable, plan built for another kind of device).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from hipdnn_iree.plugin_sdk.status import HipdnnError, Status

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BAD_PLAN, EXIT_DEVICE = 0, 1, 2, 3, 4
_DEFAULT_DEVICE = {"llvm-cpu": "local-task", "rocm": "hip", "cuda": "cuda"}
_EPILOG = ("exit codes: 0 ok, 1 operation failed, 2 usage or input files, 3 bad plan/graph file, "
           "4 device problem")


class CliError(Exception):
    """A failure with its exit code and a one-line message."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


# -- shared helpers ----------------------------------------------------------------------
MAX_KEY_BYTES = 1 << 20   # a signing/verify key file (HMAC keys are tens of bytes)


def _read(path: str, what: str, limit: int | None = None, check=None, kind: str = "a plan",
          bad_code: int = EXIT_BAD_PLAN) -> bytes:
    """A file's bytes, never more than ``limit`` (default: the plan size limit) of them: pipes and
    devices are read in chunks and refused at the first one ``check`` rejects (planfile.read_bounded).
    Missing, folder or unreadable: EXIT_USAGE; over the limit or refused by ``check``: ``bad_code``."""
    from hipdnn_iree.backend import envelope as _envelope
    from hipdnn_iree.backend import planfile
    if not os.path.lexists(path):
        raise CliError(EXIT_USAGE, f"{what} '{path}' does not exist")
    if os.path.isdir(path):
        raise CliError(EXIT_USAGE, f"{what} '{path}' is a folder, not a file")
    try:
        return planfile.read_bounded(path, what, _envelope.max_plan_bytes() if limit is None else limit, check,
                                     kind)
    except planfile.FileError as e:
        raise CliError(EXIT_USAGE, e.message) from None
    except HipdnnError as e:
        raise CliError(bad_code, e.message) from None


def _key(path: str | None, what: str) -> bytes | None:
    return None if path is None else _read(path, what, MAX_KEY_BYTES, bad_code=EXIT_USAGE)


def _json_start(head, limit) -> str | None:
    """Why ``head`` cannot begin graph JSON (an object), or None."""
    text = head[3:] if head[:3] == b"\xef\xbb\xbf" else head
    text = text.lstrip(b" \t\r\n")
    if text and not text.startswith(b"{"):
        return f"it does not start with a JSON object ('{{'): first byte {text[:1]!r}"
    return None


def _is_json(head) -> bool:
    text = head[3:] if head[:3] == b"\xef\xbb\xbf" else head
    return text.lstrip(b" \t\r\n").startswith(b"{")


def _graph_start(head, limit) -> str | None:
    """Why ``head`` cannot begin graph JSON or a hipDNN graph FlatBuffer, or None."""
    if _is_json(head):
        return None
    # NOTE: a FlatBuffer's root table (and its vtable) lie near its start: a first chunk (1 MiB) holds them
    why = f"it is neither graph JSON (first byte {head[:1]!r}, not '{{') nor a hipDNN graph FlatBuffer"
    n = len(head)
    root = int.from_bytes(head[:4], "little") if n >= 4 else 0
    if root < 4 or root + 4 > n:
        return f"{why} (root table offset {root}, {n} bytes read)"
    vtable = root - int.from_bytes(head[root:root + 4], "little", signed=True)
    if vtable < 0 or vtable + 4 > n:
        return f"{why} (root table at {root}, its vtable at {vtable} is outside the bytes read)"
    vsize, tsize = int.from_bytes(head[vtable:vtable + 2], "little"), int.from_bytes(head[vtable + 2:vtable + 4], "little")
    if vsize < 4 or vsize % 2 or vtable + vsize > n or tsize < 4:
        return f"{why} (root table vtable of {vsize} bytes at {vtable})"
    return None


def _load_plan(path: str, verify_key_file: str | None = None):
    """(bytes, PlanInfo) of a plan file, read with hd.load_plan's bounds; a bad plan is EXIT_BAD_PLAN."""
    from hipdnn_iree.backend.plan_info import read_plan
    from hipdnn_iree.backend.planfile import could_start_plan
    data = _read(path, "plan file", check=could_start_plan)
    try:
        return data, read_plan(data, _key(verify_key_file, "key file"))
    except HipdnnError as e:
        raise CliError(EXIT_BAD_PLAN, f"'{path}' is not a usable plan: {e.message}") from None


def _restore(path: str, device: str | None, verify_key_file: str | None):
    """Restores a plan on ``device`` (default: the plan's own kind); returns (handle, graph, info, seconds, data)."""
    import hipdnn_iree as hd
    from hipdnn_iree.plugins.iree_linalg.targets import check_runs_on, parse_target
    data, info = _load_plan(path, verify_key_file)
    if info.graph is not None:   # FUSPLAN kind 1: a hipDNN graph, compiled for the device when restored
        device = device or _DEFAULT_DEVICE["llvm-cpu"]
        try:
            handle = hd.create_handle(device=device)
        except HipdnnError as e:
            raise CliError(EXIT_DEVICE, f"device '{device}': {e.message}") from None
        t0 = time.perf_counter()
        try:
            graph = hd.Graph.from_compiled_plan(handle, data)
        except HipdnnError as e:
            raise CliError(EXIT_FAILED if e.status == Status.NOT_SUPPORTED else EXIT_BAD_PLAN,
                           f"cannot restore '{path}' on device '{device}': {e.message}") from None
        return handle, graph, info, time.perf_counter() - t0, data
    try:
        target = parse_target(info.target)
    except HipdnnError as e:
        raise CliError(EXIT_BAD_PLAN, f"'{path}' names an unknown target: {e.message}") from None
    if info.entries:   # several targets: the handle's device picks its module (plugins/iree_linalg/multitarget.py)
        backends = [e["target"].partition(":")[0] for e in info.entries]
        device = device or _DEFAULT_DEVICE["llvm-cpu" if "llvm-cpu" in backends else target.backend]
        target = None
    else:
        device = device or _DEFAULT_DEVICE[target.backend]
    try:
        if target is not None:
            check_runs_on(target, device)
        handle = hd.create_handle(device=device, target=None if target is None else str(target), cache=False)
    except HipdnnError as e:
        raise CliError(EXIT_DEVICE, f"device '{device}': {e.message}") from None
    t0 = time.perf_counter()
    try:
        graph = hd.Graph.from_compiled_plan(handle, data, _key(verify_key_file, "key file"))
    except HipdnnError as e:
        code = EXIT_DEVICE if e.status in (Status.NOT_SUPPORTED, Status.NOT_INITIALIZED) else EXIT_BAD_PLAN
        raise CliError(code, f"cannot restore '{path}' on device '{device}': {e.message}") from None
    return handle, graph, info, time.perf_counter() - t0, data


def _alloc(t, fill=0):
    """A buffer with the tensor's dims laid out with its declared strides."""
    import numpy as np
    from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
    from graph_ir.layout import physical_layout
    dt = numpy_dtype(int(t.data_type))
    lay = physical_layout(t.dims, t.strides)
    phys = np.full(lay.phys_shape, fill, dt)
    return np.lib.stride_tricks.as_strided(phys, shape=tuple(t.dims),
                                           strides=tuple(s * dt.itemsize for s in t.strides))


def _fit_input(t, arr, source: str):
    """``arr`` (logical dims, any layout; or the C-contiguous memory image) as a bindable buffer."""
    import numpy as np
    from hipdnn_iree.plugin_sdk.buffers import numpy_dtype
    from graph_ir.layout import physical_layout
    dt = numpy_dtype(int(t.data_type))
    what = f"input uid {t.uid} ('{t.name}') from {source}"
    if arr.dtype != dt:
        raise CliError(EXIT_USAGE, f"{what}: dtype {arr.dtype}, the plan needs {dt} (save it with "
                                   f".astype(np.{dt.name}))")
    if tuple(arr.shape) == tuple(t.dims):
        # NOTE: a stride-0 (broadcast) axis holds one value in memory; take index 0 and check the rest agree.
        src = arr[tuple(slice(0, 1) if s == 0 else slice(None) for s in t.strides)]
        if src.shape != arr.shape and not np.array_equal(np.broadcast_to(src, arr.shape), arr):
            raise CliError(EXIT_USAGE, f"{what}: the plan broadcasts this tensor on the axes with stride 0 "
                                       f"(strides {list(t.strides)}) but the data varies along them")
        buf = _alloc(t)
        buf[...] = src
        return buf
    lay = physical_layout(t.dims, t.strides)
    if arr.size == lay.num_elements and arr.flags.c_contiguous:
        return arr.reshape(lay.phys_shape)
    raise CliError(EXIT_USAGE, f"{what}: shape {list(arr.shape)} does not match the plan's dims {list(t.dims)} "
                               f"(or a memory image of {lay.num_elements} elements)")


def _parse_inputs(specs) -> dict[int, str]:
    out = {}
    for spec in specs or ():
        uid, sep, path = spec.partition("=")
        try:
            uid = int(uid)
        except ValueError:
            uid = None
        if not sep or uid is None or not path:
            raise CliError(EXIT_USAGE, f"--input {spec!r}: expected UID=FILE.npy, e.g. --input 1=x.npy")
        if uid in out:
            raise CliError(EXIT_USAGE, f"--input: uid {uid} is given twice")
        out[uid] = path
    return out


def _variant_pack(tensors, input_files: dict[int, str], random_inputs: bool):
    """{uid: buffer} for every bound tensor (``hd.PlanTensor`` list): inputs from files or random, outputs allocated."""
    import numpy as np
    by_uid = {t.uid: t for t in tensors}
    unknown = sorted(set(input_files) - {t.uid for t in tensors if t.role == "input"})
    if unknown:
        raise CliError(EXIT_USAGE, f"--input uid(s) {unknown} are not inputs of this plan; its inputs: "
                                   + _describe([t for t in tensors if t.role == "input"]))
    missing = [t for t in tensors if t.role == "input" and t.uid not in input_files]
    if missing and not random_inputs:
        raise CliError(EXIT_USAGE, "missing --input for " + _describe(missing))
    rng = np.random.default_rng(0)
    pack, outputs = {}, {}
    for uid, t in by_uid.items():
        if t.role == "output":
            pack[uid] = outputs[uid] = _alloc(t)
        elif uid in input_files:
            try:
                arr = np.load(input_files[uid], allow_pickle=False)
            except FileNotFoundError:
                raise CliError(EXIT_USAGE, f"input file '{input_files[uid]}' (uid {uid}) does not exist") from None
            except (OSError, ValueError) as e:
                raise CliError(EXIT_USAGE, f"input file '{input_files[uid]}' (uid {uid}) is not a .npy array: "
                                           f"{e}") from None
            pack[uid] = _fit_input(t, arr, f"'{input_files[uid]}'")
        else:
            buf = _alloc(t)
            if buf.dtype == np.bool_:
                buf[...] = rng.random(buf.shape) > 0.5
            elif buf.dtype.kind in "iu":
                buf[...] = rng.integers(0, 8, buf.shape)
            else:
                buf[...] = rng.uniform(-1, 1, buf.shape)
            pack[uid] = buf
    return pack, outputs, tensors


def _describe(tensors) -> str:
    return ", ".join(f"uid {t.uid} ('{t.name}', {t.data_type.name} {list(t.dims)})" for t in tensors)


def _execute(handle, graph, pack) -> None:
    try:
        graph.execute(handle, pack)
    except HipdnnError as e:
        code = EXIT_USAGE if e.status in (Status.BAD_PARAM, Status.BAD_PARAM_NULL_POINTER) else EXIT_FAILED
        raise CliError(code, f"execute failed: {e.message}") from None


# -- commands ----------------------------------------------------------------------------
def cmd_inspect(args) -> int:
    from hipdnn_iree.backend.plan_info import format_text
    _, info = _load_plan(args.plan, args.verify_key_file)
    print(json.dumps(info.as_dict(), indent=2) if args.json else format_text(info))
    return EXIT_OK


def cmd_run(args) -> int:
    import numpy as np
    files = _parse_inputs(args.input)
    handle, graph, info, _, _ = _restore(args.plan, args.device, args.verify_key_file)
    target = _plan_target(info, handle, graph)
    tensors = graph.get_compiled_plan_tensors()
    pack, outputs, _ = _variant_pack(tensors, files, random_inputs=False)
    _execute(handle, graph, pack)
    try:
        os.makedirs(args.output_dir, exist_ok=True)
    except OSError as e:
        raise CliError(EXIT_USAGE, f"cannot create output folder '{args.output_dir}': {e.strerror}") from None
    names = {t.uid: t.name for t in tensors}
    if not args.json:
        print(f"plan: {args.plan}, target {target}, device {handle.device}")
    written = []
    for uid, buf in sorted(outputs.items()):
        path = os.path.join(args.output_dir, f"{uid}.npy")
        try:
            np.save(path, np.ascontiguousarray(buf))
        except OSError as e:
            raise CliError(EXIT_USAGE, f"cannot write '{path}': {e.strerror}") from None
        written.append({"uid": uid, "name": names[uid], "dtype": str(buf.dtype), "shape": list(buf.shape),
                        "path": path})
        if not args.json:
            print(f"uid {uid} ('{names[uid]}'): {buf.dtype} {list(buf.shape)} -> {path}")
    if args.json:
        print(json.dumps({"plan": args.plan, "device": handle.device, "target": target,
                          "outputs": written}, indent=2))
    return EXIT_OK


def _plan_target(info, handle, graph) -> str:
    """The target whose module runs on the handle's device: for a several-target plan (FUSPLAN kind 3)
    the module the device picked when restored, not the first of the plan's list; a kind-1 plan (a
    hipDNN graph) has none of its own: the one it was compiled for when restored, said so. Call it
    before ``graph.release()``."""
    if info.graph is not None:
        return f"{','.join(handle.targets)} (compiled at restore: kind-1 plan)"
    # NOTE: the restored context knows which module it loaded (plugins/iree_linalg/payload.py, restore)
    ran = getattr(graph.get_execution_plan().context, "target", None)
    if ran is not None:
        return str(ran)
    return info.target or ",".join(e["target"] for e in info.entries) or "?"


def cmd_bench(args) -> int:
    from hipdnn_iree.cli.bench import format_report, run_bench
    if args.n < 1 or args.restores < 1:
        raise CliError(EXIT_USAGE, "-n and --restores must be at least 1")
    files = _parse_inputs(args.input)
    t0 = time.perf_counter()
    handle, graph, info, _, data = _restore(args.plan, args.device, args.verify_key_file)
    setup = time.perf_counter() - t0
    target = _plan_target(info, handle, graph)
    pack, _, _ = _variant_pack(graph.get_compiled_plan_tensors(), files, random_inputs=True)
    graph.release()
    vkey = _key(args.verify_key_file, "key file")
    report = run_bench(lambda: _restore_again(handle, data, vkey, args.plan), lambda g: _execute(handle, g, pack),
                       args.n, args.restores, args.progress)
    report.update(plan=args.plan, device=handle.device, target=target, plan_bytes=len(data),
                  device_and_first_restore_s=setup)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return EXIT_OK


def _restore_again(handle, data: bytes, verify_key, path: str):
    import hipdnn_iree as hd
    try:
        return hd.Graph.from_compiled_plan(handle, data, verify_key)
    except HipdnnError as e:
        raise CliError(EXIT_BAD_PLAN, f"cannot restore '{path}': {e.message}") from None


def cmd_compile(args) -> int:
    if len(args.graph) > 1 or len(args.target) > 1 or args.ray or args.store or not args.output:
        return _compile_many(args)
    args.graph, args.target = args.graph[0], args.target[0]
    return _compile_one(args)


def _compile_many(args) -> int:
    """Every graph file for every target, one plan each, into the store (``hd.build_many``), in
    local processes or as Ray tasks (``--ray``); prints one line per plan: key, graph file, target."""
    import hipdnn_iree as hd
    if args.output:
        raise CliError(EXIT_USAGE, "--output writes one plan: give one graph and one target, or leave it out "
                                   "and fetch each plan by key (hipdnn-iree fetch KEY --store URL --out PLAN)")
    if args.iree_flag or args.signing_key_file:
        raise CliError(EXIT_USAGE, "--iree-flag and --signing-key-file apply to one plan written with --output")
    graphs = []
    for path in args.graph:
        text = _read(path, "graph file", check=_json_start, kind="graph JSON")
        try:
            graphs.append(hd.Graph.from_json(text).validate())
        except HipdnnError as e:
            raise CliError(EXIT_BAD_PLAN, f"'{path}' is not a valid graph: {e.message}") from None
    targets = [t.strip() for spec in args.target for t in spec.split(",") if t.strip()]
    try:
        store = hd.PlanStore(args.store) if args.store else None
        results = hd.build_many(graphs, targets=targets, store=store, ray_address=args.ray,
                                autotune=args.autotune, cache=False if args.no_cache else None,
                                progress=not args.quiet)
    except HipdnnError as e:
        raise CliError(EXIT_USAGE if e.status == Status.BAD_PARAM else EXIT_FAILED, e.message) from None
    failed = 0
    for (i, target), got in results.items():
        if isinstance(got, HipdnnError):
            failed += 1
            print(f"FAILED {args.graph[i]} {target}: {got}")
        else:
            print(f"{got} {args.graph[i]} {target}")
    where = args.store or (store.url if store else hd.PlanStore().url)
    print(f"{len(results) - failed} of {len(results)} plans in {where}" + (f"; {failed} failed" if failed else ""),
          file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


def cmd_fetch(args) -> int:
    """Writes the plan stored under KEY to a file (no compiler, no device needed)."""
    import hipdnn_iree as hd
    try:
        store = hd.PlanStore(args.store)
        data = store.get("plan", args.key)
    except HipdnnError as e:
        raise CliError(EXIT_USAGE if e.status == Status.BAD_PARAM else EXIT_FAILED, e.message) from None
    if data is None:
        raise CliError(EXIT_FAILED, f"plan store {store.url} has no plan under key {args.key}")
    try:
        hd.save_plan(args.out, data)
    except HipdnnError as e:
        raise CliError(EXIT_USAGE, e.message) from None
    print(f"wrote {args.out}: {len(data)} bytes, plan {args.key} from {store.url}")
    return EXIT_OK


def _compile_one(args) -> int:
    import hipdnn_iree as hd
    text = _read(args.graph, "graph file", check=_json_start, kind="graph JSON")
    try:
        graph = hd.Graph.from_json(text)
        graph.validate()
    except HipdnnError as e:
        raise CliError(EXIT_BAD_PLAN, f"'{args.graph}' is not a valid graph: {e.message}") from None
    try:
        # NOTE: "a,b,c" builds one module per target into one plan (FUSPLAN kind 3)
        targets = [t.strip() for t in args.target.split(",") if t.strip()]
        target = targets if len(targets) > 1 else args.target
        # NOTE: --iree-flag goes into the handle's session (and so into the compile cache key); a
        # flag iree-compile rejects fails the build (BAD_PARAM) in the child compiler, not here.
        from hipdnn_iree.backend.handle import open_handle
        handle = open_handle(None, target, None, False if args.no_cache else None, None,
                             compile_flags=tuple(args.iree_flag or ()))
    except HipdnnError as e:
        raise CliError(EXIT_USAGE, f"--target {args.target!r}: {e.message}") from None
    graph.set_preferred_engine_id_ext("IREE_LINALG")
    t0 = time.perf_counter()
    try:
        graph.build(handle)
        data = graph.serialize_compiled_plan(_key(args.signing_key_file, "key file"))
    except HipdnnError as e:
        if args.iree_flag and e.status == Status.BAD_PARAM and "rejected compiler flags" in e.message:
            raise CliError(EXIT_USAGE, f"--iree-flag: {e.message}") from None
        code = EXIT_BAD_PLAN if e.status == Status.BAD_PARAM else EXIT_FAILED
        raise CliError(code, f"building '{args.graph}' for {handle.target} failed: {e.message}") from None
    seconds = time.perf_counter() - t0
    try:
        hd.save_plan(args.output, data)
    except HipdnnError as e:
        raise CliError(EXIT_USAGE, e.message) from None
    print(f"wrote {args.output}: {len(data)} bytes, graph '{graph.name}', target {','.join(handle.targets)}, "
          f"built in {seconds:.2f} s")
    return EXIT_OK


def cmd_mlir(args) -> int:
    """Prints the MLIR the IREE engine compiles for a graph (JSON or a hipDNN graph FlatBuffer)."""
    import hipdnn_iree as hd
    from hipdnn_iree.frontend.mlir_view import graph_mlir
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    if "," in args.target:
        raise CliError(EXIT_USAGE, f"--target {args.target!r}: name one target (the MLIR differs per target)")
    try:
        parse_target(args.target)
    except HipdnnError as e:
        raise CliError(EXIT_USAGE, f"--target {args.target!r}: {e.message}") from None
    data = _read(args.graph, "graph file", check=_graph_start, kind="a graph (JSON or hipDNN graph FlatBuffer)")
    form = "graph JSON" if _is_json(data[:4096]) else "hipDNN graph FlatBuffer"
    try:
        graph = hd.Graph.from_json(data) if form == "graph JSON" else hd.Graph.from_hipdnn_graph(data)
        graph.validate()
    except HipdnnError as e:
        raise CliError(EXIT_BAD_PLAN, f"'{args.graph}' is not a valid graph ({form}): {e.message}") from None
    try:
        text = graph_mlir(graph, args.target)
    except HipdnnError as e:
        code = EXIT_BAD_PLAN if e.status == Status.BAD_PARAM else EXIT_FAILED
        raise CliError(code, f"lowering '{args.graph}' for {args.target} failed: {e.message}") from None
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def cmd_upgrade(args) -> int:
    """A kind-1 plan (a hipDNN graph, as hipDNN's fusilli-provider writes) -> a compiled plan."""
    import hipdnn_iree as hd
    from hipdnn_iree.plugins.iree_linalg.fusplan import KIND_GRAPH_FLATBUFFER, KIND_NAMES
    data, info = _load_plan(args.input)
    kind = info.fusplan.payload_kind
    if kind != KIND_GRAPH_FLATBUFFER:
        raise CliError(EXIT_USAGE, f"'{args.input}' is already a compiled plan (FUSPLAN kind {kind}: "
                                   f"{KIND_NAMES[kind]}, target {info.target or '?'}): nothing to upgrade")
    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    try:
        handle = hd.create_handle(device=None, target=targets if len(targets) > 1 else args.target,
                                  cache=False if args.no_cache else None)
    except HipdnnError as e:
        raise CliError(EXIT_USAGE, f"--target {args.target!r}: {e.message}") from None
    t0 = time.perf_counter()
    try:
        graph = hd.Graph.from_compiled_plan(handle, data)
        out = graph.serialize_compiled_plan(_key(args.signing_key_file, "key file"))
    except HipdnnError as e:
        code = EXIT_BAD_PLAN if e.status in (Status.BAD_PARAM, Status.PLUGIN_ERROR) else EXIT_FAILED
        raise CliError(code, f"upgrading '{args.input}' for {args.target} failed: {e.message}") from None
    seconds = time.perf_counter() - t0
    try:
        hd.save_plan(args.output, out)
    except HipdnnError as e:
        raise CliError(EXIT_USAGE, e.message) from None
    from hipdnn_iree.backend.plan_info import read_plan
    new = read_plan(out)
    default = " (the default; --target rocm:<gfx> for an AMD GPU)" if args.target == _UPGRADE_DEFAULT_TARGET else ""
    print(f"upgraded {args.input} (engine {info.engine_name}, FUSPLAN kind 1, hipDNN graph '{info.graph['name']}', "
          f"{info.file_bytes} bytes)\n"
          f"  -> {args.output}: {len(out)} bytes, engine {new.engine_name}, FUSPLAN kind {new.fusplan.payload_kind} "
          f"({KIND_NAMES[new.fusplan.payload_kind]}), target {','.join(handle.targets)}{default}, compiled in "
          f"{seconds:.2f} s")
    return EXIT_OK


_UPGRADE_DEFAULT_TARGET = "llvm-cpu:host"


def cmd_cache(args) -> int:
    from hipdnn_iree.plugins.iree_linalg import cache as _cache
    folder = os.path.abspath(args.dir) if args.dir else _cache.default_dir()
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise CliError(EXIT_USAGE, f"cache folder '{folder}' is not a folder (it is a file or a device): pass the "
                                   "cache's folder with --dir, or set HIPDNN_IREE_CACHE_DIR to one")
    store = _cache.CompileCache(folder, _cache.env_max_bytes())
    if args.action == "clear":
        removed = store.clear()
        print(json.dumps({"action": "clear", "folder": store.directory, "removed": removed}, indent=2) if args.json
              else f"removed {removed} entries from {store.directory}")
        return EXIT_OK
    entries = store.entries()
    report = {"action": "info", "folder": store.directory, "exists": os.path.isdir(folder), "entries": len(entries),
              "bytes": sum(s for _, s, _ in entries), "max_bytes": store.max_bytes, "enabled": _cache.env_enabled()}
    if args.json:
        print(json.dumps(report, indent=2))
        return EXIT_OK
    missing = "" if report["exists"] else " (does not exist yet)"
    print(f"folder: {store.directory}{missing}\nentries: {len(entries)}\nsize: {report['bytes']} bytes "
          f"(cap {store.max_bytes})\nenabled: {report['enabled']} ({_cache.ENV_ENABLED})")
    return EXIT_OK


# -- argument parsing --------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hipdnn-iree", description="Inspect, run, benchmark and compile hipdnn-iree "
                                 "compiled-plan files.", epilog=_EPILOG)
    from hipdnn_iree.plugin_sdk.version import __version__
    ap.add_argument("--version", action="version", version=f"hipdnn-iree {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name, helptext, func):
        p = sub.add_parser(name, help=helptext, description=helptext, epilog=_EPILOG)
        p.set_defaults(func=func)
        return p

    def device_opts(p):
        p.add_argument("--device", default=None, help="IREE HAL device URI (default: the plan's kind: local-task "
                       "for llvm-cpu plans, hip for rocm, cuda for cuda)")
        p.add_argument("--verify-key-file", metavar="FILE", help="require a plan signature made with this key")

    p = add("inspect", "Show a plan's envelope, FUSPLAN header, entry signature, tensors, executables and sizes.",
            cmd_inspect)
    p.add_argument("plan", metavar="PLAN", help="plan file (Graph.serialize_compiled_plan() bytes)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--verify-key-file", metavar="FILE", help="also check the plan's signature with this key")

    p = add("run", "Restore a plan, execute it on .npy inputs and write each output to DIR/<uid>.npy.", cmd_run)
    p.add_argument("plan", metavar="PLAN")
    p.add_argument("--input", "-i", action="append", metavar="UID=FILE.npy",
                   help="an input tensor (repeat per input); logical dims in any layout, or the memory image")
    p.add_argument("--output-dir", "-o", required=True, metavar="DIR", help="folder for <uid>.npy outputs")
    p.add_argument("--json", action="store_true", help="print JSON (plan, device, target, outputs) instead of text")
    device_opts(p)

    p = add("bench", "Time restore, first execute and steady execute of a plan (median, min, max).", cmd_bench)
    p.add_argument("plan", metavar="PLAN")
    p.add_argument("-n", type=int, default=100, help="steady executes to time (default 100)")
    p.add_argument("--restores", type=int, default=5, help="restores (each followed by a first execute) to time")
    p.add_argument("--input", "-i", action="append", metavar="UID=FILE.npy", help="inputs (default: random data)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress bar on stderr (auto: when the run takes over 2 s)")
    device_opts(p)

    p = add("compile", "Build a plan from a graph saved with Graph.to_json() (-o PLAN), or plans for several graphs "
            "and targets into a plan store (--store, --ray).", cmd_compile)
    p.add_argument("graph", metavar="GRAPH.json", nargs="+")
    p.add_argument("--target", nargs="+", default=["llvm-cpu:host"], help="llvm-cpu[:<cpu>], rocm:<gfx>, cuda:<sm> "
                   "(default llvm-cpu:host; use e.g. llvm-cpu:x86-64-v3 for plans that travel); with -o a "
                   "comma-separated list (rocm:gfx942,cuda:sm_80,llvm-cpu:x86-64-v3) writes one plan with a module "
                   "per target; several targets without -o: one plan per graph and target, into the store")
    p.add_argument("--output", "-o", metavar="PLAN", help="plan file to write (atomically); one graph and one target")
    p.add_argument("--store", metavar="URL", help="plan store to write the plans to: redis://host:port/db or a folder "
                   "(default: HIPDNN_IREE_STORE, else the compile cache folder); prints each plan's key")
    p.add_argument("--ray", metavar="ADDRESS", help="build as Ray tasks on this cluster (auto, ray://host:10001)")
    p.add_argument("--autotune", action="store_true", help="with --store: time every engine config on the target's "
                   "device (on Ray: a task per device kind, resource gpu_<arch>) and store the winners")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.add_argument("--no-cache", action="store_true", help="always compile (skip the persistent compile cache)")
    p.add_argument("--iree-flag", action="append", metavar="FLAG", help="extra iree-compile flag, written --iree-flag=--iree-opt-level=O3 (repeatable)")
    p.add_argument("--signing-key-file", metavar="FILE", help="sign the plan (HMAC-SHA256) with this key")

    p = add("fetch", "Write the plan stored under KEY in a plan store to a file (no compiler needed).", cmd_fetch)
    p.add_argument("key", metavar="KEY", help="plan key (64 hex digits, as compile --store or g.plan_key print)")
    p.add_argument("--store", required=True, metavar="URL", help="plan store: redis://host:port/db or a folder")
    p.add_argument("--out", "-o", required=True, metavar="PLAN", help="plan file to write (atomically)")

    p = add("mlir", "Print the MLIR (linalg on tensors, verified) the IREE engine compiles for a graph: graph JSON "
            "(Graph.to_json()) or a hipDNN graph FlatBuffer (Graph.to_hipdnn_graph(), hipDNN's frontend).", cmd_mlir)
    p.add_argument("graph", metavar="GRAPH", help="graph JSON or hipDNN graph FlatBuffer file (told apart by content)")
    p.add_argument("--target", default="llvm-cpu:host", help="llvm-cpu[:<cpu>], rocm:<gfx>, cuda:<sm> (default "
                   "llvm-cpu:host); one target, no device needed")

    p = add("upgrade", "Compile a plan that holds a hipDNN graph (FUSPLAN kind 1, as hipDNN's fusilli-provider "
            "and serialize_compiled_plan(payload='hipdnn_graph') write) into a compiled plan (kind 2, or 3 for "
            "several targets) that restores without the IREE compiler.", cmd_upgrade)
    p.add_argument("input", metavar="IN", help="kind-1 plan file")
    p.add_argument("output", metavar="OUT", help="compiled plan file to write (atomically)")
    p.add_argument("--target", default=_UPGRADE_DEFAULT_TARGET,
                   help="llvm-cpu[:<cpu>], rocm:<gfx>, cuda:<sm>, or a comma-separated list (default "
                        f"{_UPGRADE_DEFAULT_TARGET}, as for 'compile'; a kind-1 plan names no device, so say "
                        "rocm:<gfx> for an AMD GPU, llvm-cpu:x86-64-v3 for a CPU plan that travels)")
    p.add_argument("--no-cache", action="store_true", help="always compile (skip the persistent compile cache)")
    p.add_argument("--signing-key-file", metavar="FILE", help="sign the compiled plan (HMAC-SHA256) with this key")

    p = add("cache", "Show or clear the persistent compile cache.", cmd_cache)
    p.add_argument("action", choices=("info", "clear"))
    p.add_argument("--dir", help="cache folder (default: HIPDNN_IREE_CACHE_DIR or ~/.cache/hipdnn-iree)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    return ap


def main(argv=None) -> int:
    """Runs the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as e:
        print(f"hipdnn-iree {args.command}: error: {e.message}", file=sys.stderr)
        return e.code
    except HipdnnError as e:
        print(f"hipdnn-iree {args.command}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"hipdnn-iree {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:   # NOTE: output piped into e.g. `head`; silence the flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as e:  # NOTE: last resort: one line, never a traceback
        print(f"hipdnn-iree {args.command}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
