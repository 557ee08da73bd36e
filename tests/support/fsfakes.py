"""Stat functions for the statvfs prober child (named `tests.support.fsfakes:<name>`); no pytest imports,
so the child starts fast. The behaviour is chosen by the mount point's last path component."""

import errno
import os
import signal
import threading
import time


def statvfs(path: str):
    """`hung*`: never returns; `slow*`: returns once `<path>.block` is gone; `denied*`: EACCES; `stale*`: ESTALE; `broken*`: a non-OSError exception;
    `wedge*`: stops the whole child (SIGSTOP), as a prober that no longer answers; else the real statvfs."""
    name = os.path.basename(path.rstrip("/"))
    if name.startswith("hung"):
        threading.Event().wait()
    if name.startswith("slow"):
        while os.path.exists(path + ".block"):  # returns once the test removes the marker file
            time.sleep(0.01)
    if name.startswith("denied"):
        raise PermissionError(errno.EACCES, "Permission denied", path)
    if name.startswith("stale"):
        raise OSError(errno.ESTALE, "Stale file handle", path)
    if name.startswith("broken"):
        raise ValueError("not an OSError")
    if name.startswith("wedge"):
        os.kill(os.getpid(), signal.SIGSTOP)
    return os.statvfs(path)


def fixed(path: str):
    """Deterministic values for golden files: 1000 blocks of 4096 bytes, half free, 100 inodes."""
    return (4096, 4096, 1000, 500, 400, 100, 60, 60, 0, 255)
