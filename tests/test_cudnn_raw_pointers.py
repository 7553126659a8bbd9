"""Integers in the cuDNN facade's variant pack (cuDNN's pointer binding) are checked before use.

On a CPU handle every bare integer is refused (BAD_PARAM naming the uid): 1, 4096 and even a real
numpy array's address (nothing can check a host address). Run in a subprocess, since binding 1
or 4096 used to kill the process with a segfault. On a GPU handle the driver decides
(hipdnn_iree/cudnn/_pointers.py): the decision rules are tested here with a stand-in for the
driver's answer, and a ``gpu``-marked test runs the real driver query (torch ``data_ptr()``
still binds and computes the right numbers; 1, 4096, a host address and a too-small allocation
are refused).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hipdnn_iree as hd
from hipdnn_iree.cudnn._pointers import PointerFacts, check_pointer

CPU_SCRIPT = textwrap.dedent('''
    import numpy as np
    import hipdnn_iree as hd
    import hipdnn_iree.cudnn as cudnn

    h = cudnn.create_handle(device="cpu")
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=h)
    A = g.tensor(name="A", dim=[1, 4, 8], stride=[32, 8, 1], uid=11)
    B = g.tensor(name="B", dim=[1, 8, 3], stride=[24, 3, 1], uid=12)
    C = g.matmul(A, B)
    C.set_output(True).set_uid(13)
    g.build([cudnn.heur_mode.A])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 4, 8)).astype(np.float32)
    b = rng.standard_normal((1, 8, 3)).astype(np.float32)
    c = np.full((1, 4, 3), np.nan, np.float32)
    keep = [a.copy(), b.copy()]
    for uid, slot in ((11, A), (12, B), (13, C)):
        real = {11: a, 12: b, 13: c}[uid].ctypes.data      # a real array's address, as a bare int
        for ptr in (1, 4096, real, np.int64(real)):
            pack = {A: a, B: b, C: c}
            pack[slot] = ptr
            try:
                g.execute(pack)
            except hd.HipdnnError as e:
                assert e.status == hd.Status.BAD_PARAM, (uid, ptr, e.status)
                assert f"uid {uid}" in str(e) and "pass the array itself" in str(e), str(e)
            else:
                raise AssertionError(f"uid {uid}: the integer {ptr} was bound")
            assert np.isnan(c).all() and all((x == y).all() for x, y in zip(keep, (a, b))), "a buffer changed"
    g.execute({A: a, B: b, C: c})                            # the arrays themselves still bind
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)
    print("OK")
''')


def test_cpu_handle_refuses_bare_integers():
    r = subprocess.run([sys.executable, "-c", CPU_SCRIPT], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), \
        f"exit {r.returncode} (negative: killed by signal {-r.returncode})\n{r.stdout}\n{r.stderr}"


# -- the GPU decision rules, with the driver's answer stood in -----------------------------------------------------
BASE = 0x7F00_0000_0000


def _facts(**kw):
    d = dict(is_device=True, ordinal=0, start=BASE, size=4096, kind="device memory")
    d.update(kw)
    return lambda ptr, driver: PointerFacts(**d)


@pytest.mark.parametrize("device", ["cuda", "cuda://0", "hip://0", "hip"])
def test_device_pointer_inside_an_allocation_passes(device):
    check_pointer(BASE + 1024, 3072, device, "tensor 'A' (uid 7)", query=_facts())


@pytest.mark.parametrize("query,words", [
    (lambda p, d: None, ["uid 7", "not device memory", "no allocation"]),
    (_facts(is_device=False, kind="host memory"), ["uid 7", "not device memory", "host memory"]),
    (_facts(ordinal=1), ["uid 7", "device 1", "'cuda'"]),
    (_facts(size=1024), ["uid 7", "holds 0 bytes", "3072 bytes"]),
    (_facts(start=BASE + 1024, size=2048), ["uid 7", "holds 2048 bytes", "3072 bytes"]),
], ids=["unknown", "host", "other_device", "past_the_end", "too_small"])
def test_device_pointer_refusals(query, words):
    with pytest.raises(hd.HipdnnError) as e:
        check_pointer(BASE + 1024, 3072, "cuda", "tensor 'A' (uid 7)", query=query)
    assert e.value.status == hd.Status.BAD_PARAM
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_driver_failure_is_bad_param():
    def broken(ptr, driver):
        raise OSError("libcuda.so.1: cannot open shared object file")
    with pytest.raises(hd.HipdnnError) as e:
        check_pointer(4096, 4, "cuda://1", "tensor 'A' (uid 7)", query=broken)
    assert e.value.status == hd.Status.BAD_PARAM and "uid 7" in str(e.value) and "cannot check" in str(e.value)


@pytest.mark.parametrize("device", [None, "local-task", "local-sync"])
def test_cpu_devices_refuse_every_integer(device):
    with pytest.raises(hd.HipdnnError) as e:
        check_pointer(BASE, 4, device, "tensor 'A' (uid 7)", query=_facts())
    assert e.value.status == hd.Status.BAD_PARAM and "uid 7" in str(e.value)


# -- the real driver -----------------------------------------------------------------------------------------------
GPU_SCRIPT = textwrap.dedent('''
    import numpy as np, torch
    import hipdnn_iree as hd
    import hipdnn_iree.cudnn as cudnn

    h = cudnn.create_handle()
    assert h.hd.device not in (None, "local-task", "local-sync"), h.hd.device
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=h)
    A = g.tensor(name="A", dim=[1, 64, 32], stride=[2048, 32, 1], uid=21)
    B = g.tensor(name="B", dim=[1, 32, 16], stride=[512, 16, 1], uid=22)
    C = g.matmul(A, B)
    C.set_output(True).set_uid(23)
    g.build([cudnn.heur_mode.A])
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(1, 64, 32, generator=gen).cuda()
    b = torch.randn(1, 32, 16, generator=gen).cuda()
    c = torch.full((1, 64, 16), float("nan"), device="cuda")
    ref = (a.double() @ b.double()).cpu().numpy()
    g.execute({A: a.data_ptr(), B: b.data_ptr(), C: c.data_ptr()})          # cuDNN's pointer binding
    torch.cuda.synchronize()
    np.testing.assert_allclose(c.cpu().numpy(), ref, rtol=1e-4, atol=1e-4)
    small = torch.empty(16, device="cuda")                                  # 64 bytes: too small for A
    host = np.zeros((1, 64, 32), np.float32)
    c.fill_(float("nan"))
    for uid, slot in ((21, A), (23, C)):
        for ptr in (1, 4096, host.ctypes.data, small.data_ptr(), a.data_ptr() + a.numel() * 4 - 4):
            pack = {A: a.data_ptr(), B: b.data_ptr(), C: c.data_ptr()}
            pack[slot] = ptr
            try:
                g.execute(pack)
            except hd.HipdnnError as e:
                assert e.status == hd.Status.BAD_PARAM and f"uid {uid}" in str(e), str(e)
            else:
                raise AssertionError(f"uid {uid}: pointer {ptr:#x} was bound")
    torch.cuda.synchronize()
    assert torch.isnan(c).all(), "the output changed"
    print("OK")
''')


@pytest.mark.gpu
def test_gpu_handle_checks_device_pointers():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    r = subprocess.run([sys.executable, "-c", GPU_SCRIPT], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), \
        f"exit {r.returncode} (negative: killed by signal {-r.returncode})\n{r.stdout}\n{r.stderr}"
