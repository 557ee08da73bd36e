"""Range answers split in worker processes, beside the query threads.

A steady cycle at 4,096 nodes splits about 87 MB of answers and reads about 4 million number texts
(matrix.py): 1.1 s under this process' one interpreter lock, which the query threads share with the
thread that merges the answers and builds the window. On a serve host with cores to spare, an
answer of MIN_BYTES or more is split and its numbers read (`split_numbers`) in one of `processes`
worker processes instead: the answer's bytes go to the worker, its series' labels (bytes) and its
points (two float arrays) come back, which pickling moves in a fraction of the split's time.
Smaller answers are split in the query thread, as is every answer on a host of fewer than
MIN_CORES cores, where the engine, the merge and the workers would share the same two cores and
the copies would only add. A pool that breaks (a worker killed, no process can be started) is
dropped with the reason kept, and answers are split in the thread from then on: the result is
the same either way (tests/test_matrix.py).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from .matrix import Matrix, split_numbers

log = logging.getLogger(__name__)

MIN_BYTES = 1 << 20
MIN_CORES = 4
MAX_PROCESSES = 4


def host_processes() -> int:
    """Worker processes for this host: none under MIN_CORES cores, else half of them, at most
    MAX_PROCESSES (a cycle has two to eight answers in flight at a time)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 0 if cores < MIN_CORES else min(MAX_PROCESSES, cores // 2)


class DecodePool:
    """Splits answers in `processes` worker processes (none: in the calling thread)."""

    def __init__(self, processes: int):
        self.processes = max(0, processes)
        self.broken = ""  # why the pool was dropped, if it was
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def split(self, content: bytes) -> Matrix | None:
        """`split_numbers(content)`, in a worker where the answer is large enough."""
        if not self.processes or len(content) < MIN_BYTES or self.broken:
            return split_numbers(content)
        try:
            return self._executor().submit(split_numbers, content).result()
        except (BrokenProcessPool, OSError, RuntimeError, EOFError, pickle.PickleError) as exc:
            self._drop(exc)
            return split_numbers(content)

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # forkserver: serve's threads (web server, poller) are not forked into the workers
                ctx = multiprocessing.get_context("forkserver")
                self._pool = ProcessPoolExecutor(self.processes, mp_context=ctx)
            return self._pool

    def _drop(self, exc: Exception) -> None:
        with self._lock:
            self.broken = self.broken or f"{type(exc).__name__}: {exc}"[:200]
            pool, self._pool = self._pool, None
        log.warning("decode processes dropped (%s): range answers are split in the query threads", self.broken)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


_SHARED: dict[int, DecodePool] = {}
_SHARED_LOCK = threading.Lock()


def shared(processes: int) -> DecodePool:
    """One pool per size in this process, shared by its sources (serve has one; tests, several)."""
    with _SHARED_LOCK:
        pool = _SHARED.get(processes)
        if pool is None or pool.broken:
            pool = _SHARED[processes] = DecodePool(processes)
        return pool
