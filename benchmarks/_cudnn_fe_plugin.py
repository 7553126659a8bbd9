"""pytest plugin for ``benchmarks/cudnn_fe_tests.py``: cuDNN FE's own test files, unchanged, on
this project's facade.

Loaded with ``-p _cudnn_fe_plugin`` before the suite's conftest, it makes ``import cudnn`` resolve
to ``hipdnn_iree.cudnn`` (the only stand-in: everything under it is the real engine, IREE
included). When the ``looseversion`` package is missing (the GPU machine has no network), a small
``LooseVersion`` of this file's own takes its place: the suite compares
``LooseVersion(cudnn.backend_version_string())`` with strings such as "9.5.0".

``HIPDNN_IREE_FE_SIDE=cudnn`` (the runner's real cuDNN side) leaves ``import cudnn`` to the
nvidia-cudnn-frontend package, so the same files run on real cuDNN for comparison.

``HIPDNN_IREE_FE_CPU=1`` (a debugging aid for machines without a GPU, never the measurement):
torch tensors the suite asks for on "cuda" are made on the CPU and the facade runs on IREE's
CPU device, so the files can be stepped through where no GPU is. Results on the H200 are the
ones that count (docs/cudnn_fe_tests.md).
"""
from __future__ import annotations

import functools
import os
import re
import sys
import types


def _install_cudnn() -> None:
    if os.environ.get("HIPDNN_IREE_FE_SIDE") == "cudnn":
        return                     # the real cuDNN side: ``import cudnn`` is nvidia-cudnn-frontend's
    import hipdnn_iree.cudnn as facade
    sys.modules["cudnn"] = facade


class _LooseVersion:
    """Version strings compared component by component, numbers as numbers ("9.10.0" > "9.5")."""

    def __init__(self, text=None):
        self.vstring = str(text)
        self.version = [int(p) if p.isdigit() else p for p in re.findall(r"\d+|[A-Za-z]+", self.vstring)]

    @classmethod
    def _of(cls, other):
        return other if isinstance(other, _LooseVersion) else cls(other)

    def _cmp(self, other):
        a, b = self.version, self._of(other).version
        for x, y in zip(a, b):
            if x == y:
                continue
            if type(x) is not type(y):       # a number sorts after a word ("9.5" > "9.rc")
                return 1 if isinstance(x, int) else -1
            return -1 if x < y else 1
        return (len(a) > len(b)) - (len(a) < len(b))

    def __lt__(self, o): return self._cmp(o) < 0
    def __le__(self, o): return self._cmp(o) <= 0
    def __gt__(self, o): return self._cmp(o) > 0
    def __ge__(self, o): return self._cmp(o) >= 0
    def __eq__(self, o): return self._cmp(o) == 0
    def __hash__(self): return hash(tuple(self.version))
    def __repr__(self): return f"LooseVersion({self.vstring!r})"
    def __str__(self): return self.vstring


def _install_looseversion() -> None:
    try:
        import looseversion  # noqa: F401
    except ImportError:
        mod = types.ModuleType("looseversion")
        mod.LooseVersion = _LooseVersion
        sys.modules["looseversion"] = mod


# -- HIPDNN_IREE_FE_CPU=1: "cuda" tensors on the CPU --------------------------------------------
def _is_cuda(d) -> bool:
    return isinstance(d, str) and d.startswith("cuda") or type(d).__name__ == "device" and d.type == "cuda"


def _map_device(args, kwargs):
    if _is_cuda(kwargs.get("device")):
        kwargs["device"] = "cpu"
    args = tuple("cpu" if _is_cuda(a) else a for a in args)
    return args, kwargs


def _wrap(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        args, kwargs = _map_device(args, kwargs)
        return fn(*args, **kwargs)
    return call


def _cpu_torch() -> None:
    import torch

    for name in ("randn", "rand", "randint", "zeros", "ones", "empty", "full", "tensor", "arange", "empty_strided",
                 "zeros_like", "ones_like", "empty_like", "randn_like", "rand_like", "full_like", "as_tensor",
                 "randperm", "linspace", "eye"):
        if hasattr(torch, name):
            setattr(torch, name, _wrap(getattr(torch, name)))
    torch.Tensor.to = _wrap(torch.Tensor.to)
    _gen = torch.Generator

    class _Generator(_gen):       # torch.Generator(device="cuda") (test_mhas_v2.py's sdpa/ helpers)
        def __new__(cls, *args, **kwargs):
            args, kwargs = _map_device(args, kwargs)
            return _gen(*args, **kwargs)
    torch.Generator = _Generator
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.nn.Module.to = _wrap(torch.nn.Module.to)
    torch.nn.Module.cuda = lambda self, *a, **k: self

    class _Stream:
        cuda_stream = 0

        def synchronize(self):
            pass

        def wait_stream(self, other):
            pass

    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 0
    cuda.get_device_name = lambda *a: "CPU (HIPDNN_IREE_FE_CPU=1)"
    cuda.get_device_capability = lambda *a: (9, 0)
    cuda.get_device_properties = lambda *a: types.SimpleNamespace(    # test_mhas_v2.py's env_info
        name="CPU (HIPDNN_IREE_FE_CPU=1)", multi_processor_count=1, major=9, minor=0, total_memory=0)
    cuda.current_stream = lambda *a: _Stream()
    cuda.ExternalStream = lambda *a, **k: _Stream()
    cuda.Stream = lambda *a, **k: _Stream()          # v1.23's conftest makes one for the handle
    cuda.synchronize = lambda *a: None
    cuda.manual_seed = lambda *a: None
    cuda.manual_seed_all = lambda *a: None
    cuda.current_device = lambda: 0
    cuda.mem_get_info = lambda *a: (64 << 30, 64 << 30)   # the FE fuzzers size their cases by free memory
    cuda.empty_cache = lambda: None
    cuda.memory_allocated = lambda *a: 0


def pytest_load_initial_conftests(early_config, parser, args):
    if os.environ.get("HIPDNN_IREE_FE_CPU", "") not in ("", "0"):
        _cpu_torch()
    _install_looseversion()
    _install_cudnn()


def pytest_collection_modifyitems(config, items):
    """``HIPDNN_IREE_FE_SHARD=I/N`` (1-based): keep every N-th test from the I-th, so N processes share a
    file's tests (cudnn_fe_tests.py --shard); the order within a shard is the file's."""
    shard = os.environ.get("HIPDNN_IREE_FE_SHARD", "")
    if not shard:
        return
    i, n = (int(v) for v in shard.split("/"))
    keep = items[i - 1::n]
    config.hook.pytest_deselected(items=[it for it in items if it not in set(keep)])
    items[:] = keep
