#!/usr/bin/env bash
# Runs on the GPU machine (no IREE compiler, no network): install the carried runtime wheels,
# then the correctness matrix and the benchmark over plans compiled on the build machine.
# Usage: bash benchmarks/gpu_run.sh [tests|newtests|blocks|fe|sbs|fuzz|cases|kernels|fleet|setup|all]   (results go to $OUT or ./gpu_results)
# all = tests, blocks, sbs. benchmarks/README.md says what each mode runs and reports.
# tests/newtests need the IREE compiler there too: .gpu/iree_compiler.tar.xz (iree-base-compiler's
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
# The random-graph fuzzer's GPU tier (tests/fuzz_ops.py, issue 49) runs first in every mode: FUZZ_CASES graphs
# (default 2000; 0 skips it) built here for FUZZ_TARGET and run on the GPU against float64 references, in
# FUZZ_JOBS parallel shards; fuzz_summary.json/.md hold the merged counts, every wrong case with its
# reproduction line, the refusals and the median build time.
if [ "${FUZZ_CASES:-2000}" != 0 ] && [ "$what" != setup ]; then
    jobs=${FUZZ_JOBS:-12}; per=$(( (${FUZZ_CASES:-2000} + jobs - 1) / jobs ))
    for s in $(seq 1 "$jobs"); do
        timeout "${FUZZ_TIMEOUT:-900}" python3 tests/fuzz_ops.py --deadline-s "${FUZZ_DEADLINE:-420}" --device cuda --target "${FUZZ_TARGET:-cuda:sm_80}" \
            --size "${FUZZ_SIZE:-large}" ${FUZZ_KINDS:+--kinds $FUZZ_KINDS} ${FUZZ_KNOB:+--knob $FUZZ_KNOB} --cases "$per" --seed "$(( ${FUZZ_SEED:-100} + s ))" \
            --json "$OUT/fuzz_shard_$s.json" > "$OUT/fuzz_shard_$s.txt" 2>&1 &
    done
    wait
    python3 tests/fuzz_ops.py --merge "$OUT"/fuzz_shard_*.json --json "$OUT/fuzz_summary.json" --md "$OUT/fuzz_summary.md"
    echo "fuzz rc=$?"; cat "$OUT/fuzz_summary.md" | cut -c1-400 | head -60
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
    # the gpu-marked tests, built and run on this machine (one process, as users work)
    python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_output_strides.py tests/test_gpu_build_all.py \
        tests/test_zero_copy.py > "$OUT/tests.txt" 2>&1
    echo "tests rc=$?"; tail -25 "$OUT/tests.txt"
fi
if [ "$what" = fe ]; then
    # cuDNN FE's own test files (carried in .cudnn_fe, not committed) on the facade
    # FE_SHARDS=N: N processes share each file's tests (cudnn_fe_tests.py --shard I/N; the fuzzers' 1,040 and
    # 2,052 cases fit a 10-minute call only this way); fe_I.json per shard
    n=${FE_SHARDS:-1}
    for s in $(seq 1 "$n"); do
        python3 benchmarks/cudnn_fe_tests.py .cudnn_fe/test/python ${FE_FILES:+--files $FE_FILES} --timeout ${FE_TIMEOUT:-900} \
            $( [ "$n" -gt 1 ] && echo --shard "$s/$n" ) --json "$OUT/fe_$s.json" --md "$OUT/fe_$s.md" > "$OUT/fe_$s.txt" 2>&1 &
    done
    wait
    echo "fe done"; cat "$OUT"/fe_*.md
fi
if [ "$what" = blocks ] || [ "$what" = all ]; then
    # the GPU correctness gate: real model blocks (plans in .gpu_blocks, compiled on the build machine by
    # `python benchmarks/gpu_blocks.py compile --target cuda:sm_80 --out .gpu_blocks`) against float64 torch
    python3 benchmarks/gpu_blocks.py run --plans .gpu_blocks --device cuda --out "$OUT/blocks" > "$OUT/blocks.txt" 2>&1
    echo "blocks rc=$?"; grep -E "^\| " "$OUT/blocks.txt"
fi
if [ "$what" = sbs ] || [ "$what" = all ]; then
    # side by side with NVIDIA's cuDNN (plans in .gpu_side_by_side, compiled on the build machine)
    python3 benchmarks/cudnn_side_by_side.py run --plans .gpu_side_by_side \
        ${SBS_CASES:+--cases $SBS_CASES} --json "$OUT/side_by_side.json" --md "$OUT/side_by_side.md" > "$OUT/side_by_side.txt" 2>&1
    echo "side_by_side rc=$?"; cat "$OUT/side_by_side.md"
fi
if [ "$what" = newtests ]; then
    python3 -m pytest -q -p no:cacheprovider -m gpu ${NEW_TESTS:-tests/test_alias_inputs.py tests/test_int8.py} \
        > "$OUT/newtests.txt" 2>&1
    echo "newtests rc=$?"; tail -15 "$OUT/newtests.txt"
fi
if [ "$what" = kernels ]; then
    # generated kernels (GPU_KERNELS=GENERATED, Triton 3.6.0 as installed here) vs IREE's code vs torch: plans
    # built here (needs .gpu/iree_compiler.tar.xz), checked against float64 torch, timed interleaved
    python3 -c "import triton; print('triton', triton.__version__)" >> "$OUT/gpu.txt" 2>&1
    # the gpu-marked tests of the three patterns first (correctness), then the timed benchmark
    [ "${KERNELS_TESTS:-1}" = 0 ] || timeout "${KERNELS_TESTS_TIMEOUT:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu --durations=8 \
        tests/test_generated_kernels.py tests/test_generated_sdpa.py tests/test_generated_conv.py > "$OUT/kernels_tests.txt" 2>&1
    echo "kernels tests rc=$?"; tail -40 "$OUT/kernels_tests.txt" | cut -c1-300
    timeout "${KERNELS_TIMEOUT:-420}" python3 benchmarks/gpu_kernels.py ${KERNELS_TINY:+--tiny} ${KERNELS_ONLY:+--only $KERNELS_ONLY} \
        --json "$OUT/kernels.json" > "$OUT/kernels.txt" 2>&1
    echo "kernels rc=$?"; tail -25 "$OUT/kernels.txt" | cut -c1-600
fi
if [ "$what" = fleet ]; then
    # plans for a fleet (docs/fleet.md): needs the carried compiler and ray + redis (pip wheels) in /tmp/site, and
    # redis-server for a Redis store (else a folder store). 1) compile throughput on this machine's cores with a
    # `ray start --head` cluster per worker count; 2) autotune through Ray on one gpu_sm_90 resource vs in-process.
    python3 -c "import ray, redis; print('ray', ray.__version__, 'redis', redis.__version__)" >> "$OUT/gpu.txt" 2>&1
    python3 benchmarks/fleet_compile.py --graphs "${FLEET_GRAPHS:-50}" --workers ${FLEET_WORKERS:-1 2 4 8 16} --ray-start \
        --json "$OUT/fleet_compile.json" --md "$OUT/fleet_compile.md" > "$OUT/fleet_compile.txt" 2>&1
    echo "fleet_compile rc=$?"; cat "$OUT/fleet_compile.md"
    python3 benchmarks/fleet_autotune.py --target "${FLEET_TARGET:-cuda:sm_90}" --device cuda \
        --json "$OUT/fleet_autotune.json" > "$OUT/fleet_autotune.txt" 2>&1
    echo "fleet_autotune rc=$?"; tail -8 "$OUT/fleet_autotune.txt"
fi
if [ "$what" = cases ]; then
    # the issue-49 cases (grouped half-precision convs, odd-shaped matmuls in 9 layouts, NaN diagnostics) through
    # the cuDNN facade with torch CUDA tensors, in CASES_JOBS parallel shards
    n=${CASES_JOBS:-4}
    for s in $(seq 1 "$n"); do
        python3 benchmarks/facade_cases.py --device cuda --target "${FUZZ_TARGET:-cuda:sm_80}" --shard "$s/$n" \
            --json "$OUT/cases_$s.json" > "$OUT/cases_$s.txt" 2>&1 &
    done
    # the same cases without the two CUDA workarounds (known issues 10, 11): the faults, measured beside the fix
    m=${CASES_UNFIXED_JOBS:-2}
    for s in $(seq 1 "$m"); do
        python3 benchmarks/facade_cases.py --device cuda --target "${FUZZ_TARGET:-cuda:sm_80}" --shard "$s/$m" \
            --without-workarounds --json "$OUT/cases_unfixed_$s.json" > "$OUT/cases_unfixed_$s.txt" 2>&1 &
    done
    wait
    python3 -c "import json,sys; r=[x for f in sys.argv[1:] for x in json.load(open(f))['results']]; print({s: sum(x['status']==s for x in r) for s in ('right','WRONG','refused','error')}); [print(x['status'], x['case'], x.get('err'), x.get('bad_fraction'), x.get('nan'), x.get('why','')[:200]) for x in r if x['status']!='right']" "$OUT"/cases_[0-9]*.json
    echo "--- without the workarounds"
    python3 -c "import json,sys; r=[x for f in sys.argv[1:] for x in json.load(open(f))['results']]; print({s: sum(x['status']==s for x in r) for s in ('right','WRONG','refused','error')}); [print(x['status'], x['case'], x.get('err'), x.get('bad_fraction'), x.get('nan')) for x in r if x['status']!='right']" "$OUT"/cases_unfixed_*.json
fi
# (further modes, e.g. a GPU fuzzer's, go here; benchmarks/README.md lists them)
