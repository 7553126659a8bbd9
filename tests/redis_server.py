"""A real ``redis-server`` for the plan-store tests (Debian's package: ``apt-get install redis-server``).

``HIPDNN_IREE_TEST_REDIS=redis://host:port`` names a running server (``.ci/run`` starts one); without
it the fixture starts its own on a free local port. Persistence, so that a restart loses nothing:
the append-only file, fsync'ed on every write (``--appendonly yes --appendfsync always``), in a
temporary folder; RDB snapshots off (``--save ""``). Tests that restart Redis always use a server
of their own. No redis-server binary: the tests skip, saying so.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

ENV = "HIPDNN_IREE_TEST_REDIS"


def binary() -> str | None:
    return shutil.which("redis-server") or next((p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server")
                                                 if os.path.exists(p)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server process on 127.0.0.1:``port`` with its data in ``folder``."""

    def __init__(self, port: int | None = None, folder: str | None = None):
        self.port = port or free_port()
        self.folder = folder or tempfile.mkdtemp(prefix="hipdnn-iree-redis.")
        self.proc = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> "RedisServer":
        exe = binary()
        if exe is None:
            raise RuntimeError("redis-server is not installed")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.folder, "--appendonly", "yes",
             "--appendfsync", "always", "--save", "", "--daemonize", "no", "--protected-mode", "no",
             "--logfile", os.path.join(self.folder, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        import redis
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: "
                                   + open(os.path.join(self.folder, "redis.log")).read()[-2000:])
            try:
                if redis.Redis(port=self.port, socket_connect_timeout=0.5).ping():
                    return self
            except redis.exceptions.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not answer in 20 s")

    def kill(self, sig=signal.SIGKILL) -> None:
        """Stops the server (SIGKILL by default: no shutdown save; the append-only file has every write)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=20)
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        shutil.rmtree(self.folder, ignore_errors=True)
