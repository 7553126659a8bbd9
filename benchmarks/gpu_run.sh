#!/usr/bin/env bash
# Runs on the GPU machine (no IREE compiler, no network): install the carried runtime wheels,
# then the correctness matrix and the benchmark over plans compiled on the build machine.
# Usage: bash benchmarks/gpu_run.sh [cases|bench|tests|autotune|fe|newtests|ab|train|sbs|quant|onedispatch|all]   (results go to $OUT or ./gpu_results)
# tests/autotune need the IREE compiler there too: .gpu/iree_compiler.tar.xz (iree-base-compiler's
# wheel unpacked, libIREECompiler.so stripped), unpacked beside the runtime; .whl also carries the
# pure-Python test tools (pytest, pluggy, iniconfig, packaging, flatbuffers) and ml_dtypes.
set -u
OUT=${OUT:-gpu_results}
mkdir -p "$OUT"
if [ -f .gpu_rt/site.tar.xz ]; then
    # the same wheels unpacked, without IREE's tracy runtime and command-line tools (1.8 MB, not 16:
    # it leaves room in the carry for the compiler and the cuDNN frontend wheel)
    mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu_rt/site.tar.xz
else
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
fi
if [ -d .cudnn_whl ] && [ ! -d /tmp/site/cudnn ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .cudnn_whl/*.whl 2>&1 | tail -2
fi
if [ -f .gpu/iree_compiler.tar.xz ] && [ ! -d /tmp/site/iree/compiler ]; then
    tar -C /tmp/site -xJf .gpu/iree_compiler.tar.xz
fi
chmod +x /tmp/site/iree/compiler/_mlir_libs/iree-* 2>/dev/null   # NOTE: a wheel unpacked by zipfile loses exec bits
export PYTHONPATH=/tmp/site:$PWD
# the engine plugins' entry points, as `pip install .` would register them (the checkout itself is on PYTHONPATH)
di=/tmp/site/hipdnn_iree_checkout-0.dist-info
if [ ! -d "$di" ]; then
    mkdir -p "$di" && printf 'Metadata-Version: 2.1\nName: hipdnn-iree-checkout\nVersion: 0\n' > "$di/METADATA"
    python3 -c "import tomllib; ep = tomllib.load(open('pyproject.toml', 'rb'))['project']['entry-points']; print(''.join(f'[{g}]\n' + ''.join(f'{k} = {v}\n' for k, v in e.items()) for g, e in ep.items()))" > "$di/entry_points.txt"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__)" >> "$OUT/gpu.txt" 2>&1
what=${1:-all}
if [ "$what" = cases ] || [ "$what" = all ]; then
    python3 benchmarks/gpu_cases.py run --plans .gpu_plans --device cuda --json "$OUT/cases.json" > "$OUT/cases.txt" 2>&1
    echo "cases rc=$?"; grep -E "^\| " "$OUT/cases.txt" | grep -v "| PASS |" | head -40
    if [ -d .gpu_plans89 ]; then
        python3 benchmarks/gpu_cases.py run --plans .gpu_plans89 --device cuda --json "$OUT/cases89.json" > "$OUT/cases89.txt" 2>&1
        echo "cases sm_89 rc=$?"; grep -E "^\| " "$OUT/cases89.txt"
    fi
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    python3 benchmarks/gpu_bench.py run --plans .gpu_bench --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
    echo "bench rc=$?"; grep -E "^\| " "$OUT/bench.txt"
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
    # the gpu-marked tests, built and run on this machine (one process, as users work)
    python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_output_strides.py tests/test_gpu_build_all.py \
        tests/test_zero_copy.py > "$OUT/tests.txt" 2>&1
    echo "tests rc=$?"; tail -25 "$OUT/tests.txt"
fi
if [ "$what" = fe ]; then
    # cuDNN FE's own test files (carried in .cudnn_fe, not committed) on the facade
    python3 benchmarks/cudnn_fe_tests.py .cudnn_fe/test/python ${FE_FILES:+--files $FE_FILES} --timeout ${FE_TIMEOUT:-900} \
        --json "$OUT/fe.json" --md "$OUT/fe.md" > "$OUT/fe.txt" 2>&1
    echo "fe rc=$?"; cat "$OUT/fe.md"
fi
if [ "$what" = train ]; then
    # training ops (plans compiled on the build machine: .gpu_train_plans) and the training sample
    # (.gpu_train_sample), both against torch autograd on this GPU
    python3 benchmarks/gpu_training.py run --plans .gpu_train_plans --device cuda --json "$OUT/training_cases.json" \
        > "$OUT/training_cases.txt" 2>&1
    echo "training cases rc=$?"; grep -E "^\| " "$OUT/training_cases.txt"
    python3 samples/07_train_small.py --device cuda --target cuda:sm_80 --plans .gpu_train_sample \
        --json "$OUT/train_sample.json" > "$OUT/train_sample.txt" 2>&1
    echo "train sample rc=$?"; cat "$OUT/train_sample.txt"
fi
if [ "$what" = sbs ]; then
    # side by side with NVIDIA's cuDNN (plans in .gpu_side_by_side, compiled on the build machine)
    python3 benchmarks/cudnn_side_by_side.py run --plans .gpu_side_by_side \
        ${SBS_CASES:+--cases $SBS_CASES} --json "$OUT/side_by_side.json" --md "$OUT/side_by_side.md" > "$OUT/side_by_side.txt" 2>&1
    echo "side_by_side rc=$?"; cat "$OUT/side_by_side.md"
fi
if [ "$what" = onedispatch ]; then
    # issue 30's one-dispatch forms (MoE region, DEQUANT_MATMUL=ONE_DISPATCH) against the split forms, built
    # here (needs .gpu/iree_compiler.tar.xz), and the facade's F8_128x4 NVFP4 matmul
    python3 benchmarks/gpu_one_dispatch.py --device cuda --target cuda:sm_80 ${ONE_SKIP:+--skip $ONE_SKIP} ${ONE_ARGS:-} \
        --json "$OUT/one_dispatch.json" > "$OUT/one_dispatch.txt" 2>&1
    echo "one_dispatch rc=$?"; cut -c1-900 "$OUT/one_dispatch.txt" | tail -30
fi
if [ "$what" = quant ]; then
    # issue 30 (block scale, FP8/FP4, fp8 matmul vs torch._scaled_mm, custom op, facade NVFP4), built
    # here (needs .gpu/iree_compiler.tar.xz), then the MoE cases compiled here and restored
    python3 benchmarks/gpu_quant.py --device cuda --target cuda:sm_80 --bench --json "$OUT/quant.json" > "$OUT/quant.txt" 2>&1
    echo "quant rc=$?"; grep -E "^\| |checks passed" "$OUT/quant.txt" | cut -c1-600
    python3 benchmarks/gpu_training.py compile --target cuda:sm_80 --out /tmp/moe_plans --only moe_grouped_matmul_none \
        moe_grouped_matmul_gather moe_grouped_matmul_scatter moe_grouped_matmul_backward > "$OUT/moe_compile.txt" 2>&1
    python3 benchmarks/gpu_training.py run --plans /tmp/moe_plans --device cuda --json "$OUT/moe.json" > "$OUT/moe.txt" 2>&1
    echo "moe rc=$?"; grep -E "^\| " "$OUT/moe.txt"
fi
if [ "$what" = ab ]; then
    # an older checkout's lowering/ and hipdnn_iree/ in .old_tree (git archive), against this one
    python3 benchmarks/matmul_fold_ab.py --old .old_tree --json "$OUT/matmul_fold_ab.json" > "$OUT/ab.txt" 2>&1
    echo "ab rc=$?"; tail -8 "$OUT/ab.txt"
fi
if [ "$what" = newtests ]; then
    python3 -m pytest -q -p no:cacheprovider -m gpu ${NEW_TESTS:-tests/test_alias_inputs.py tests/test_int8.py} \
        > "$OUT/newtests.txt" 2>&1
    echo "newtests rc=$?"; tail -15 "$OUT/newtests.txt"
fi
if [ "$what" = autotune ] || [ "$what" = all ]; then
    for run in A B; do
        python3 benchmarks/autotune_in_process.py --out "$OUT/autotune_$run" --dtypes ${DTYPES:-f32 f16 bf16} \
            > "$OUT/autotune_$run.txt" 2>&1
        echo "autotune $run rc=$?"; grep -E "^\| |^\{\"blocks" "$OUT/autotune_$run.txt"
    done
fi
