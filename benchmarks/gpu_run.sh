#!/usr/bin/env bash
# Runs on the GPU machine (no IREE compiler, no network): install the carried runtime wheels,
# then the correctness matrix and the benchmark over plans compiled on the build machine.
# Usage: bash benchmarks/gpu_run.sh [cases|bench|all]   (results go to $OUT or ./gpu_results)
set -u
OUT=${OUT:-gpu_results}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD
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
