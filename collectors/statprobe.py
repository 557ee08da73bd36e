"""statvfs with a deadline: one long-lived prober child process, so a hung mount never hangs the agent.

Why a child process: a thread blocked in statvfs on a dead NFS/Lustre/GPFS server sits in the kernel
(often in D state) and cannot be cancelled; a scrape that waits on it hangs, and a fresh thread per
scrape piles up. Here the agent sends each scrape's mount points to one child (newline-delimited
JSON on stdin/stdout); the child stats them and answers as soon as all returned, or at the deadline
with whatever returned. In the common case the thread that read the request stats the paths itself
(no thread hand-off; a one-shot interval timer wakes a watchdog thread only when a batch is slow,
see child_main), so a scrape costs the child one wake-up. A path that did not answer stays
outstanding in the child and is *not* sent again (node_exporter's stuckMounts); when its statvfs
finally returns the child reports it as a late result and the path is probed normally again. So
the child holds at most one stuck thread per hung mount.

If the child itself stops answering (no reply to a batch by the deadline plus a margin, after it said
hello) it is killed with SIGKILL and not waited for (a process with a thread in D state may linger
until the kernel lets go); it is reaped later without blocking, and a new child is started by a
later probe, after a back-off of 1, 2, 4 ... 60 s while children keep wedging or dying (in the
meantime every path reads as timed out). At most `max_lingering` killed children may linger
unreaped before no new one is started at all.

Protocol (one JSON object per line):
  parent -> child  {"id": 7, "t": 0.5, "p": ["/mnt/a", ...]}
  child -> parent  {"hello": pid} | {"fatal": "msg"} | {"id": 7, "r": {"/mnt/a": [9 ints] | errno}}
                   | {"late": "/mnt/b", "r": [9 ints] | errno}
The 9 ints are statvfs' f_bsize, f_frsize, f_blocks, f_bfree, f_bavail, f_files, f_ffree, f_favail,
f_flag; an int alone is the errno (0 when the stat function raised something other than OSError).

The stat function is named `module:function` (default `os:statvfs`), so tests can inject one that
hangs for chosen paths without any test hook in the production path. This module keeps its imports
light because the child imports it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque
from typing import NamedTuple

DEFAULT_STAT_FUNCTION = "os:statvfs"
CHILD_MAX_THREADS = 256  # more hung mounts than this on one node and the rest time out too
REPLY_MARGIN = 0.2  # seconds past the deadline the parent waits for the child's batch reply


class StatValues(NamedTuple):
    bsize: int
    frsize: int
    blocks: int
    bfree: int
    bavail: int
    files: int
    ffree: int
    favail: int
    flag: int


class StatError(NamedTuple):
    errno: int  # 0: the stat function failed without an errno


class _TimedOut:
    __slots__ = ()

    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT = _TimedOut()  # the stat did not answer within the deadline (or is still stuck from before)


# ---------------------------------------------------------------------------------------------
# Pure parsing of the child's lines (property-tested: no input makes it raise)


_INT_ONLY = {int}


def _outcome(value) -> StatValues | StatError | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return StatError(value)
    if type(value) is list and len(value) == 9 and set(map(type, value)) == _INT_ONLY:
        return StatValues._make(value) if min(value) >= 0 else None  # the common case, checked in C
    if isinstance(value, list) and len(value) == 9 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return StatValues(*value)
    return None


class Message(NamedTuple):
    kind: str  # "hello", "fatal", "reply", "late"
    ident: int = 0
    text: str = ""
    results: dict | None = None  # path -> StatValues | StatError


def parse_message(line: bytes | str) -> Message | None:
    """One line from the child -> Message, or None when it is not a well-formed message."""
    try:
        obj = json.loads(line)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    if "hello" in obj:
        return Message("hello")
    if "fatal" in obj:
        return Message("fatal", text=str(obj["fatal"]))
    if "late" in obj:
        path, out = obj["late"], _outcome(obj.get("r"))
        if isinstance(path, str) and out is not None:
            return Message("late", results={path: out})
        return None
    ident, raw = obj.get("id"), obj.get("r")
    if isinstance(ident, int) and not isinstance(ident, bool) and isinstance(raw, dict):
        results = {}
        for path, value in raw.items():
            out = _outcome(value)
            if out is not None:
                results[path] = out
        return Message("reply", ident=ident, results=results)
    return None


# ---------------------------------------------------------------------------------------------
# The parent side


class StatProber:
    """Owns the prober child; `probe(paths, timeout)` never blocks much longer than `timeout`."""

    def __init__(self, stat_function: str = DEFAULT_STAT_FUNCTION, startup_grace: float = 10.0,
                 max_lingering: int = 4, python: str | None = None):
        self.stat_function = stat_function
        self.startup_grace = startup_grace
        self.max_lingering = max_lingering
        self.python = python or sys.executable
        self.restarts = 0  # children started after the first (killed as wedged, or died)
        self.fatal = ""  # the child could not load the stat function: a configuration error
        self.pending: set[str] = set()  # paths outstanding (stuck) in the current child
        self.lingering: list = []  # killed children not yet reaped
        self._proc = None
        self._poll = None
        self._buf = b""
        self._ready = False
        self._started_at = 0.0
        self._next_id = 1
        self._sent: list[str] = []  # the last batch's paths, and their JSON: usually the same list
        self._sent_json = "[]"
        self._lock = threading.Lock()  # one probe at a time; the Scraper already serialises calls
        self._started_once = False
        self._backoff = 0.0  # seconds to wait before starting a child after one was killed or died
        self._not_before = 0.0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def probe(self, paths: list[str], timeout: float) -> dict[str, StatValues | StatError | _TimedOut]:
        with self._lock:
            return self._probe(paths, timeout)

    def _probe(self, paths: list[str], timeout: float) -> dict:
        self._reap()
        if self.fatal:
            raise RuntimeError(self.fatal)
        if self._proc is not None and self._proc.poll() is not None:
            self._forget_child()  # it died (crash, OOM kill): start another below
        if self._proc is None and (time.monotonic() < self._not_before or not self._start()):
            return {p: TIMED_OUT for p in paths}
        start = time.monotonic()
        results: dict = {}
        wanted = set(paths)
        if not self._ready:
            # A child just started (tens of ms, more on a loaded node) takes its deadline from when it
            # reads the request: wait for its hello so that its answer is not mistaken for a hang.
            self._drain(timeout, wanted, results, None, until_ready=True)
            timeout = max(0.05, timeout - (time.monotonic() - start))
        elif self.pending:
            self._drain(0.0, wanted, results, None)  # late answers that arrived between scrapes
        to_send = [p for p in dict.fromkeys(paths) if p not in self.pending and p not in results]
        reply = None
        if to_send:
            ident = self._next_id
            self._next_id += 1
            if to_send != self._sent:
                self._sent, self._sent_json = to_send, json.dumps(to_send, separators=(",", ":"))
            line = f'{{"id":{ident},"t":{float(timeout)!r},"p":{self._sent_json}}}\n'
            if self._send(line.encode(), timeout):
                reply = self._drain(timeout + REPLY_MARGIN, wanted, results, ident)
            if self.fatal:
                self._forget_child()
                raise RuntimeError(self.fatal)
            if reply is None:
                if self._proc is not None and (self._ready or time.monotonic() - self._started_at > self.startup_grace):
                    self._kill()  # alive but not answering: wedged
                # else: still starting up; its answer to this batch will be ignored by id
            else:
                self._backoff = 0.0
                for p in to_send:
                    out = reply.get(p)
                    if out is None:
                        self.pending.add(p)  # stuck in the child: not sent again until it returns
                    else:
                        results[p] = out
        for p in paths:
            results.setdefault(p, TIMED_OUT)
        return results

    # -- child management ---------------------------------------------------------------------

    def _start(self) -> bool:
        import select
        import subprocess

        if len(self.lingering) >= self.max_lingering:
            return False
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            proc = subprocess.Popen(
                [self.python, "-S", "-c", "from collectors.statprobe import child_main; child_main()",
                 self.stat_function],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
        except OSError as exc:
            self.fatal = f"cannot start the statvfs prober: {exc}"
            return False
        os.set_blocking(proc.stdin.fileno(), False)
        self._poll = select.poll()
        self._poll.register(proc.stdout.fileno(), select.POLLIN)
        self._proc, self._buf, self._ready = proc, b"", False
        self._started_at = time.monotonic()
        if self._started_once:
            self.restarts += 1
        self._started_once = True
        return True

    def _send(self, data: bytes, timeout: float) -> bool:
        """Write one request; a child that does not take it within `timeout` is killed as wedged."""
        import select

        fd = self._proc.stdin.fileno()
        view = memoryview(data)
        deadline = time.monotonic() + timeout
        writable = None
        while view:
            try:
                view = view[os.write(fd, view):]
                continue
            except BlockingIOError:
                pass  # the pipe is full (thousands of mount points): wait until the child reads
            except OSError:
                break  # broken pipe: it is gone
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if writable is None:
                writable = select.poll()
                writable.register(fd, select.POLLOUT)
            writable.poll(left * 1000)
        else:
            return True
        self._kill()
        return False

    def _drain(self, wait: float, wanted: set, results: dict, ident: int | None, until_ready: bool = False):
        """Read what the child says for up to `wait` s; return the reply to `ident` when it comes
        (or return as soon as it has said hello, with `until_ready`)."""
        deadline = time.monotonic() + wait
        fd = self._proc.stdout.fileno()
        while self._proc is not None:
            left = deadline - time.monotonic()
            events = self._poll.poll(int(left * 1000) + 1 if left > 0 else 0)
            if not events:
                return None
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self._forget_child()  # EOF: the child exited
                return None
            self._buf += chunk
            reply = None
            while b"\n" in self._buf:
                raw, self._buf = self._buf.split(b"\n", 1)
                msg = parse_message(raw)
                if msg is None:
                    continue
                if msg.kind == "hello":
                    self._ready = True
                elif msg.kind == "fatal":
                    self.fatal = msg.text
                elif msg.kind == "late":
                    for path, out in msg.results.items():
                        self.pending.discard(path)
                        if path in wanted:
                            results[path] = out
                elif msg.kind == "reply" and msg.ident == ident:
                    reply = msg.results
            if reply is not None or self.fatal or (until_ready and self._ready):
                return reply
            if left <= 0:
                return None
        return None

    def _kill(self) -> None:
        import signal

        proc = self._proc
        if proc is None:
            return
        try:
            proc.send_signal(signal.SIGKILL)  # checks first that it was not reaped (pid reuse)
        except OSError:
            pass
        self.lingering.append(proc)
        self._detach()
        self._reap()

    def _forget_child(self) -> None:
        if self._proc is not None:
            self.lingering.append(self._proc)
        self._detach()
        self._reap()

    def _detach(self) -> None:
        # A child that wedges or dies again right away (one mount that stops the whole process, a
        # crashing stat function) is restarted after 1, 2, 4 ... 60 s, not on every scrape.
        self._backoff = min(max(1.0, 2 * self._backoff), 60.0)
        self._not_before = time.monotonic() + self._backoff
        proc = self._proc
        self._proc, self._poll, self._buf, self._ready = None, None, b"", False
        self.pending.clear()  # what was stuck in that child is retried in the next one
        for stream in (proc.stdin, proc.stdout) if proc is not None else ():
            try:
                stream.close()
            except OSError:
                pass

    def _reap(self) -> None:
        # poll() reaps without blocking; a child stuck in the kernel simply stays on the list.
        self.lingering = [p for p in self.lingering if p.poll() is None]

    def close(self) -> None:
        with self._lock:
            self._kill()
            deadline = time.monotonic() + 1.0
            while self.lingering and time.monotonic() < deadline:
                self._reap()
                if self.lingering:
                    time.sleep(0.01)


# ---------------------------------------------------------------------------------------------
# The child side: `python -S -c "from collectors.statprobe import child_main; child_main()" SPEC`


def _emit(lock: threading.Lock, obj: dict) -> None:
    data = memoryview((json.dumps(obj, separators=(",", ":")) + "\n").encode())
    with lock:
        while data:
            data = data[os.write(1, data):]


class _Batch:
    __slots__ = ("ident", "todo", "want", "results", "deadline", "step", "seen", "answered")

    def __init__(self, ident: int, paths: list, timeout: float):
        self.ident = ident
        self.todo: deque = deque(paths)  # not started yet; the reader and helpers take from the left
        self.want = len(paths)
        self.results: dict = {}
        self.deadline = time.monotonic() + timeout
        # No progress for a step while paths are still queued: the threads on the batch sit in
        # hung statvfs calls, so a helper takes the rest.
        self.step = max(timeout / 20, 0.005)
        self.seen = 0  # results at the watchdog's last look
        # Released once the reply is out: a bare lock is the cheapest latch.
        self.answered = threading.Lock()
        self.answered.acquire()


class _Worker:
    __slots__ = ("go", "job", "busy")

    def __init__(self):
        self.go = threading.Lock()
        self.go.acquire()
        self.job = None  # a _Batch to help with, or READ to become the reader
        self.busy = False  # inside stat_from: on a batch, perhaps stuck in a stat


_READ = "read"


def child_main(argv: list[str] | None = None) -> None:
    """Read requests, stat, answer each by its deadline with what returned.

    The common case costs no thread hand-off at all: the thread that read the request (the
    reader) stats the paths itself and writes the reply; it only arms a one-shot interval timer
    first (setitimer(2), process-wide) and disarms it after. Measured in the running agent, the
    previous design (the main thread handing each batch to a worker and waiting for it) cost the
    child ~160 us of CPU per scrape, two thread wake-ups included. SIGALRM is blocked in every
    thread and taken by a watchdog thread in sigwait(2), so the watchdog runs only when a batch
    is slow: at each step without progress while paths are still queued it adds a helper thread
    for the rest; at the deadline it writes the reply with what returned and, when the reader is
    still on that batch (in a stat that has not returned, or with slow ones still queued), hands
    the reader's role to an idle (or new) thread, so that the next request is read at once.
    A path whose stat has not returned stays outstanding: it is not stat'ed again until it
    returns, and is then reported as a late result. So each hung mount holds one thread.
    """
    import importlib
    import signal

    # First of all, before any thread exists (the stat function's module could start one): every
    # thread inherits the block, so the timer's SIGALRM (whose default action ends the process)
    # only ever reaches the watchdog's sigwait.
    alarm = {signal.SIGALRM}
    signal.pthread_sigmask(signal.SIG_BLOCK, alarm)
    argv = sys.argv[1:] if argv is None else argv
    spec = argv[0] if argv else DEFAULT_STAT_FUNCTION
    out_lock = threading.Lock()
    try:
        module, _, name = spec.partition(":")
        stat = getattr(importlib.import_module(module), name)
    except Exception as exc:  # report, do not crash silently: the parent turns it into an error
        _emit(out_lock, {"fatal": f"cannot load stat function {spec!r}: {type(exc).__name__}: {exc}"})
        os._exit(2)

    lock = threading.Lock()
    outstanding: set = set()  # queued or being stat'ed: never stat'ed twice at once
    idle: list = []
    state = {"threads": 1, "current": None, "reader": None}
    stdin = sys.stdin.buffer

    def answer(batch: _Batch) -> dict | None:
        """The reply to send, once per batch; call with `lock` held."""
        if state["current"] is not batch:
            return None
        state["current"] = None
        return {"id": batch.ident, "r": dict(batch.results)}

    def send_reply(batch: _Batch, reply: dict | None) -> None:
        if reply is not None:
            _emit(out_lock, reply)
            batch.answered.release()

    def stat_from(me: _Worker, batch: _Batch) -> None:
        """Take the batch's queued paths until there are none."""
        while True:
            with lock:
                if not batch.todo:
                    me.busy = False
                    return
                path = batch.todo.popleft()
                me.busy = True
            try:
                value = [int(v) for v in tuple(stat(path))[:9]]
            except OSError as exc:
                value = exc.errno or 0
            except BaseException:  # a broken stat function must not kill the thread
                value = 0
            reply = None
            with lock:
                outstanding.discard(path)
                current = batch is state["current"]
                if current:
                    batch.results[path] = value
                    if len(batch.results) == batch.want:
                        reply = answer(batch)
            if current:
                send_reply(batch, reply)
            else:
                _emit(out_lock, {"late": path, "r": value})

    def start(job) -> None:
        """An idle thread (or a new one, up to CHILD_MAX_THREADS) takes the job; call with `lock` held."""
        if idle:
            w = idle.pop()
        elif state["threads"] < CHILD_MAX_THREADS:
            state["threads"] += 1
            w = _Worker()
            threading.Thread(target=work, args=(w,), daemon=True).start()
        else:
            return
        if job is _READ:
            state["reader"] = w
        w.job = job
        w.go.release()

    def read(me: _Worker) -> None:
        """The reader's loop; returns when the role passed to another thread while this one was stuck."""
        while True:
            line = stdin.readline()
            if not line:
                os._exit(0)  # the agent is gone; do not wait for threads stuck in the kernel
            try:
                req = json.loads(line)
                ident, timeout, paths = int(req["id"]), float(req["t"]), list(req["p"])
            except Exception:
                continue
            with lock:
                fresh = []
                for p in paths:
                    if isinstance(p, str) and p not in outstanding:
                        outstanding.add(p)
                        fresh.append(p)
                batch = _Batch(ident, fresh, timeout)
                state["current"] = batch
                reply = None if fresh else answer(batch)
            if reply is not None:
                send_reply(batch, reply)
                continue
            signal.setitimer(signal.ITIMER_REAL, batch.step)
            stat_from(me, batch)
            with lock:
                still_reader = state["reader"] is me
            if not still_reader:
                return
            batch.answered.acquire()  # helpers may still be on it; the watchdog answers by the deadline
            signal.setitimer(signal.ITIMER_REAL, 0)

    def work(me: _Worker) -> None:
        while True:
            job = me.job
            if job is _READ:
                read(me)
            elif job is not None:
                stat_from(me, job)
            with lock:
                me.job = None
                idle.append(me)
            me.go.acquire()

    def watchdog() -> None:
        while True:
            signal.sigwait(alarm)
            reply = None
            with lock:
                batch = state["current"]
                if batch is None:
                    continue
                left = batch.deadline - time.monotonic()
                if left <= 0:
                    reply = answer(batch)
                    reader = state["reader"]
                    if reader is not None and reader.busy:
                        start(_READ)  # the reader is still on its batch (stuck or slow): another reads on
                else:
                    if len(batch.results) == batch.seen and batch.todo:
                        start(batch)
                    batch.seen = len(batch.results)
            if reply is not None:
                send_reply(batch, reply)
            else:
                signal.setitimer(signal.ITIMER_REAL, max(0.001, min(batch.step, left)))

    threading.Thread(target=watchdog, daemon=True).start()
    _emit(out_lock, {"hello": os.getpid()})
    main = _Worker()
    main.job = _READ
    state["reader"] = main
    work(main)
