"""``hd.KernelCache``: compiled modules shared by graphs of one topology built at other shapes.

As cuDNN frontend's kernel cache: a graph with ``set_kernel_cache(kc)`` (dynamic shapes, which it
implies) looks its compiled module up here before compiling, under a key that leaves out the dims
that may vary (graph_ir/dynamic.py says which). A graph of the same ops, types, fixed dims, layouts
and engine config at other batch sizes or sequence lengths then builds without compiling.

The cache is engine-agnostic: engines store what they like under their own keys. It lives in
memory, in this process; plans made from it serialize like any other.
"""
from __future__ import annotations

import threading


class KernelCache:
    """An in-memory store of compiled modules, keyed by the engine (thread-safe).

    Example:
        >>> import hipdnn_iree as hd
        >>> kc = hd.KernelCache()
        >>> len(kc), kc.hits, kc.misses
        (0, 0, 0)
    """

    def __init__(self):
        self._entries: dict = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key):
        """The entry stored under ``key``, or None (counted as a hit or a miss)."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
            return found

    def put(self, key, value) -> None:
        with self._lock:
            self._entries[key] = value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"KernelCache({len(self)} module(s), {self.hits} hit(s), {self.misses} miss(es))"
