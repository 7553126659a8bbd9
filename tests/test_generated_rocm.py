"""Generated kernels on ROCm (knob GPU_KERNELS=GENERATED, targets rocm:gfx942 and rocm:gfx950), on the CPU.

Plans are built with the public API and compiled by the real IREE compiler; each test then reads the
compiled module back: the HIP executable flatbuffer inside the ``.vmfb`` (IREE's
``iree/schemas/hip_executable_def.fbs``: exports with their block dims, modules with their HSACO) and
the HSACO's own metadata (ELF note + kernel descriptor, ``kernels/hsaco.py``). What they check is what
IREE's HIP driver relies on when it launches the kernel: the entry symbol, the arch, wavefront 64, all
LDS static (``hipModuleLaunchKernel`` gets 0 dynamic bytes), the workgroup size, the kernarg layout.
No AMD GPU ran any of it (docs/generated_kernels.md, ROCm section)."""
from __future__ import annotations

import re
import struct

import pytest

pytest.importorskip("triton")

import hipdnn_iree as hd  # noqa: E402
from hipdnn_iree.plugins.iree_linalg.kernels.hsaco import MACH, read_hsaco  # noqa: E402

ARCHS = ("gfx942", "gfx950")
LDS = {"gfx942": 65536, "gfx950": 163840}


def _hip_executables(vmfb: bytes) -> list[dict]:
    """Every HIP executable flatbuffer (file identifier ``HIP1``) in a ``.vmfb``: its exports
    (name, block dims, shared memory field, constant count, binding flags) and module images."""
    import flatbuffers
    from flatbuffers import number_types as N
    from flatbuffers.table import Table
    found = []
    for m in re.finditer(b"HIP1", vmfb):
        if m.start() < 4:
            continue
        buf = bytearray(vmfb[m.start() - 4:])
        try:
            t = Table(buf, flatbuffers.encode.Get(N.UOffsetTFlags.packer_type, buf, 0))

            def vec(tab, slot):
                o = tab.Offset(4 + 2 * slot)
                return [Table(buf, tab.Indirect(tab.Vector(o) + 4 * j)) for j in range(tab.VectorLen(o))] if o else []

            def field(tab, slot, fmt):
                o = tab.Offset(4 + 2 * slot)
                return struct.unpack_from(fmt, buf, tab.Pos + o) if o else None

            def string(tab, slot):
                o = tab.Offset(4 + 2 * slot)
                return bytes(tab.String(o + tab.Pos)) if o else None

            exports = []
            for e in vec(t, 0):   # ExportDef: module_ordinal, kernel_name, block_dims, block_shared_memory_size,
                fo = e.Offset(4 + 2 * 5)   # constant_count, binding_flags, debug_info
                flags = [struct.unpack_from("<Q", buf, e.Vector(fo) + 8 * j)[0] for j in range(e.VectorLen(fo))] \
                    if fo else []
                exports.append({"name": string(e, 1).decode(), "block": field(e, 2, "<III"),
                                "shared": (field(e, 3, "<I") or (0,))[0], "constants": (field(e, 4, "<I") or (0,))[0],
                                "bindings": flags})
            images = [string(mod, 0) for mod in vec(t, 1)]
        except (IndexError, struct.error, UnicodeDecodeError, TypeError, AttributeError):
            continue
        if exports and images and all(i is not None and i[:4] == b"\x7fELF" for i in images):
            found.append({"exports": exports, "images": images})
    return found


def _extern_attrs(mlir: str) -> list[dict]:
    out = []
    for m in re.finditer(r'"hal\.dispatch\.extern"\(.*', mlir):
        line = m.group(0)
        out.append({"name": re.search(r'export_name = "(\w+)"', line).group(1),
                    "local_memory": int(re.search(r"workgroup_local_memory = (\d+) : index", line).group(1)),
                    "workgroup_size": int(re.search(r"workgroup_size = \[(\d+) : index", line).group(1)),
                    "targets": re.findall(r'#hal\.executable\.target<"(\w+)", "([\w-]+)", \{([^}]*)\}>', line),
                    "bindings": line.count("#hal.pipeline.binding<")})
    return out


def _build(g, handle, knobs):
    g.validate()
    g.build_operation_graph(handle)
    g.create_execution_plan("IREE_LINALG", knobs)
    g.check_support()
    g.build_plans()
    return g


def _matmul_graph(handle, knobs):
    """[1, 256, 128] x [1, 128, 192] f16 (W column-major) + bias, relu: one matmul pattern."""
    g = hd.Graph(name="mm_bias_relu", io_data_type=hd.DataType.HALF, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="X", uid=1, dim=[1, 256, 128])
    w = g.tensor(name="W", uid=2, dim=[1, 128, 192], stride=[128 * 192, 1, 128])
    b = g.tensor(name="bias", uid=3, dim=[1, 1, 192])
    y = g.pointwise(g.pointwise(g.matmul(x, w), b, mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_uid(4)
    return _build(g, handle, knobs)


def _sdpa_graph(handle, knobs, d=128):
    """bf16 causal attention, 2 batches, 8 query heads over 2 kv heads, 512 tokens, head dim ``d``."""
    g = hd.Graph(name="sdpa", io_data_type=hd.DataType.BFLOAT16, compute_data_type=hd.DataType.FLOAT)
    q = g.tensor(name="Q", uid=1, dim=[2, 8, 512, d])
    k = g.tensor(name="K", uid=2, dim=[2, 2, 512, d])
    v = g.tensor(name="V", uid=3, dim=[2, 2, 512, d])
    g.sdpa(q, k, v, is_causal=True).set_output(True).set_uid(4)
    return _build(g, handle, knobs)


def _check_module(g, handle, arch, name, n_in):
    """The plan's module holds one generated kernel ``name`` for ``arch``, and the HSACO IREE packed
    is a launchable one for IREE's HIP driver; returns the kernel's metadata."""
    ctx = g.get_execution_plan().context
    assert g.get_engine_config_at_index(0).knobs["GPU_KERNELS"] == "GENERATED"
    (ext,) = _extern_attrs(ctx.mlir)
    assert ext["name"] == name
    # one variant: the plan's arch as an HSACO in a ROCm (HIP) executable, no CUDA variant
    assert ext["targets"] == [("rocm", "rocm-hsaco-fb", f'abi = "hip", hipdnn.kernel = "{arch}-hsaco"')]
    assert ext["bindings"] == n_in + 3   # inputs, the result, Triton's two scratch pointers
    wg, lds = ext["workgroup_size"], ext["local_memory"]
    assert wg % 64 == 0 and 0 < lds <= LDS[arch]

    # the serialized plan, restored, carries the module: read it back from there
    r = hd.Graph.from_compiled_plan(handle, g.serialize_compiled_plan())
    vmfb = bytes(r.get_execution_plan().context.vmfb)
    assert vmfb == bytes(ctx.vmfb)
    exes = [x for x in _hip_executables(vmfb) if any(e["name"] == name for e in x["exports"])]
    assert len(exes) == 1, "one HIP executable exports the generated kernel"
    (exe,) = exes
    (exp,) = exe["exports"]
    assert exp["block"] == (wg, 1, 1)
    assert exp["shared"] == 0            # IREE's HIP runtime refuses a nonzero block_shared_memory_size
    assert exp["constants"] == 0
    assert exp["bindings"] == [1] * n_in + [0] * 3   # READ_ONLY inputs, writable output + scratch
    (image,) = exe["images"]

    co = read_hsaco(image)
    assert co["target"] == f"amdgcn-amd-amdhsa--{arch}" and co["mach"] == MACH[arch]
    assert list(co["kernels"]) == [name]
    k = co["kernels"][name]
    assert k["symbol"] == f"{name}.kd"
    assert k["wavefront_size"] == 64
    # all LDS static: the group segment is the dispatch's declared size, in the note and the descriptor
    assert k["group_segment_fixed_size"] == lds == k["descriptor"]["group_segment_fixed_size"]
    assert co["lds_symbols"] == []
    assert k["max_flat_workgroup_size"] == wg
    assert k["private_segment_fixed_size"] == 0 and k["vgpr_spill_count"] == 0 and k["sgpr_spill_count"] == 0
    # kernarg: one 8-byte global pointer per binding, in binding order, nothing else
    assert [(a["value_kind"], a["size"], a["offset"]) for a in k["args"]] == \
        [("global_buffer", 8, 8 * i) for i in range(n_in + 3)]
    assert k["kernarg_segment_size"] == 8 * (n_in + 3) == k["descriptor"]["kernarg_size"]
    try:   # an independent MessagePack decoder agrees with hsaco.py's, where one is installed
        import msgpack
    except ImportError:
        msgpack = None
    if msgpack is not None:
        note = image[image.index(b"AMDGPU\0\0") + 8:]
        meta = msgpack.Unpacker()
        meta.feed(note)
        assert next(iter(meta)) == co["metadata"]
    return k


@pytest.mark.parametrize("arch", ARCHS)
def test_matmul_bias_relu_plan_embeds_a_launchable_hsaco(arch):
    h = hd.create_handle(device=None, target=f"rocm:{arch}", cache=False)
    g = _matmul_graph(h, {"GPU_KERNELS": "GENERATED"})
    k = _check_module(g, h, arch, "hipdnn_matmul", 3)
    assert k["group_segment_fixed_size"] == 32768   # 128x128x64 f16 tiles of A and B, 2 stages
    text = g.get_execution_plan().context.mlir
    assert "linalg.batch_matmul" not in text and "arith.maximumf" not in text   # the chain is the kernel


@pytest.mark.parametrize("arch", ARCHS)
def test_sdpa_plan_embeds_a_launchable_hsaco(arch):
    h = hd.create_handle(device=None, target=f"rocm:{arch}", cache=False)
    g = _sdpa_graph(h, {"GPU_KERNELS": "GENERATED"})
    _check_module(g, h, arch, "hipdnn_sdpa", 3)
    assert "iree_linalg_ext.attention" not in g.get_execution_plan().context.mlir


def test_auto_on_rocm_builds_no_generated_kernel():
    h = hd.create_handle(device=None, target="rocm:gfx942", cache=False)
    g = _matmul_graph(h, {})
    ctx = g.get_execution_plan().context
    assert g.get_engine_config_at_index(0).knobs.get("GPU_KERNELS", "AUTO") != "GENERATED"
    assert "hal.dispatch.extern" not in ctx.mlir
    exes = _hip_executables(bytes(ctx.vmfb))
    assert exes, "IREE's own ROCm kernels are in the module"
    assert not any(e["name"].startswith("hipdnn_") for x in exes for e in x["exports"])


def test_knob_and_generator_identity_per_arch():
    from graph_ir.desc import OpKind
    from hipdnn_iree.plugins.iree_linalg.kernels import generator_id
    from hipdnn_iree.plugins.iree_linalg.knobs import GraphSummary, resolve
    from hipdnn_iree.plugins.iree_linalg.targets import parse_target
    s = GraphSummary(kinds=frozenset({OpKind.MATMUL}), has_double=False, conv_ranks=(), f32_only=False)
    gen = {a: resolve(parse_target(f"rocm:{a}"), s, {"GPU_KERNELS": "GENERATED"}) for a in ARCHS}
    for a in ARCHS:
        assert gen[a].policy.generated_kernels == generator_id(a) == f"{generator_id()}:hip-{a}"
        auto = resolve(parse_target(f"rocm:{a}"), s, {})
        assert auto.policy.generated_kernels == "" and auto.identity == \
            resolve(parse_target(f"rocm:{a}"), s, {"GPU_KERNELS": "IREE"}).identity
    assert gen["gfx942"].policy.to_json() != gen["gfx950"].policy.to_json()
    # an arch the generator has not been checked for keeps IREE's code (and reports IREE)
    assert resolve(parse_target("rocm:gfx1100"), s, {"GPU_KERNELS": "GENERATED"}).policy.generated_kernels == ""
    assert resolve(parse_target("cuda:sm_80"), s, {"GPU_KERNELS": "GENERATED"}).policy.generated_kernels == \
        generator_id()


def test_triton_hsaco_without_the_static_lds_rewrite_is_refused():
    """Triton's own HSACO keeps its LDS dynamic (group segment 0): the check that guards every
    generated ROCm kernel refuses it, and accepts the rebuilt one."""
    import triton
    from triton.backends.compiler import GPUTarget
    from hipdnn_iree.plugins.iree_linalg.kernels import _triton_matmul_src as src
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_matmul import _constexprs, config_rocm
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_rocm import check_hsaco, compile_hip
    from lowering.ops.generated_matmul import MatmulPattern, Operand
    p = MatmulPattern(nodes=(0,), batch=1, m=256, n=256, k=256, a=Operand(1, "f16", (0, 256, 1)),
                      b=Operand(2, "f16", (0, 256, 1)), acc_round="f32", steps=(), out_uid=3, out_dtype="f16")
    cfg = config_rocm(p)
    sig, const = _constexprs(p, cfg)
    ck = triton.compile(triton.compiler.ASTSource(fn=src.hipdnn_matmul, signature=sig, constexprs=const),
                        target=GPUTarget("hip", "gfx942", 64),
                        options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
    assert re.search(r"@global_smem = external .*addrspace\(3\) global \[0 x i8\]", ck.asm["llir"])
    assert ck.metadata.shared > 0 and read_hsaco(ck.asm["hsaco"])["kernels"]["hipdnn_matmul"][
        "group_segment_fixed_size"] == 0
    with pytest.raises(hd.HipdnnError, match="group segment 0"):
        check_hsaco(ck.asm["hsaco"], "gfx942", "hipdnn_matmul", ck.metadata.shared, 64 * cfg["num_warps"], 5)
    k = compile_hip(src.hipdnn_matmul, sig, const, {}, "gfx942", cfg["num_warps"], cfg["num_stages"], 3)
    assert k.shared == ck.metadata.shared == k.info["kernels"]["hipdnn_matmul"]["group_segment_fixed_size"]
    with pytest.raises(hd.HipdnnError, match="gfx950"):   # the wrong arch is refused too
        check_hsaco(k.image, "gfx950", "hipdnn_matmul", k.shared, k.block, 5)
    with pytest.raises(hd.HipdnnError, match="explicit kernel arguments"):
        check_hsaco(k.image, "gfx942", "hipdnn_matmul", k.shared, k.block, 6)


def test_bad_inputs_raise_hipdnn_errors():
    from hipdnn_iree.plugins.iree_linalg.kernels.triton_rocm import check_hsaco, static_lds
    with pytest.raises(hd.HipdnnError, match="unreadable code object"):
        check_hsaco(b"\x7fELF" + b"\0" * 60, "gfx942", "k", 0, 64, 1)
    with pytest.raises(hd.HipdnnError, match="external LDS"):
        static_lds("@x = external addrspace(3) global [0 x i8], align 16\n", 16)
    with pytest.raises(ValueError):
        read_hsaco(b"not an elf")
    from hipdnn_iree.plugins.iree_linalg.kernels import generate
    from lowering.ops.generated_matmul import MatmulPattern, Operand
    p = MatmulPattern(nodes=(0,), batch=1, m=64, n=64, k=64, a=Operand(1, "f32", (0, 64, 1)),
                      b=Operand(2, "f32", (0, 64, 1)), acc_round="f32", steps=(), out_uid=3, out_dtype="f32")
    (k,) = generate(p, "rocm:gfx950")
    assert (k.arch, k.fmt, k.block, k.grid) == ("gfx950", "hsaco", 256, (1, 1, 1))
    for cut in (64, 600, len(k.image) // 2):   # truncated code objects: ValueError, then HipdnnError
        with pytest.raises(ValueError):
            read_hsaco(k.image[:cut])
        with pytest.raises(hd.HipdnnError):
            check_hsaco(k.image[:cut], "gfx950", k.name, k.shared, k.block, 5)
