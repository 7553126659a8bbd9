"""GPU correctness matrix of the training ops: plans compiled HERE, restored and run on a GPU,
checked against torch autograd in float64 on the same GPU (``benchmarks/gpu_cases.py``'s runner,
over the cases of ``benchmarks/gpu_train_cases/``).

    python benchmarks/gpu_training.py compile --target cuda:sm_80 --out .gpu_train_plans
    python benchmarks/gpu_training.py run --plans .gpu_train_plans --device cuda --json out.json
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpu_cases  # noqa: E402

gpu_cases.CASES.clear()
for _m in sorted(m.name for m in pkgutil.iter_modules([os.path.join(HERE, "gpu_train_cases")])):
    importlib.import_module(f"gpu_train_cases.{_m}")


def main(argv=None) -> int:
    return gpu_cases.main(argv)


if __name__ == "__main__":
    sys.exit(main())
