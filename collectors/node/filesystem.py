"""Filesystem capacity and inodes (Lustre, GPFS, NFS, BeeGFS and local filesystems), hang-proof.

Sources: the mount table `<procfs>/1/mountinfo` (else `<procfs>/self/mountinfo`, else `<procfs>/mounts`),
and statvfs(2) of each selected mount point resolved under `--path.rootfs`. No privileges needed
beyond read access to the mount points; a mount point the agent may not enter is a device error.

statvfs of network and other filesystems runs in one long-lived prober child process
(collectors/statprobe.py) under a deadline (`--collector.filesystem.stat-timeout`); local ext2/3/4,
xfs and tmpfs, whose statfs reads in-memory counters, are stat'ed in-process (IN_PROCESS_FS_TYPES).
A hung NFS/Lustre/GPFS mount becomes
`gangwatch_filesystem_stat_timeout 1` with no capacity series, is not probed again until its
stuck statvfs returns, and never hangs the scrape or piles up threads.

The mount table is not re-read while it is unchanged: on a real procfs, the collector keeps the
table's file open and polls it (the kernel flags POLLPRI on a mountinfo descriptor whenever a
mount is added, removed or changed in that namespace, see proc(5)), so a scrape with the same
mounts costs one poll(2) instead of regenerating the whole table; mount points under a fixture or
copied tree are read on every scrape.

Metrics (labels `device`, `mountpoint`, `fstype`): `gangwatch_filesystem_{size,free,avail}_bytes`,
`gangwatch_filesystem_files`, `gangwatch_filesystem_files_free`, `gangwatch_filesystem_readonly`,
`gangwatch_filesystem_stat_timeout`, `gangwatch_filesystem_device_error`; and
`gangwatch_filesystem_prober_restarts_total`.

Failure modes: no mount table -> NoData. A mount whose statvfs fails (EACCES, ESTALE, ENOTCONN, EIO)
-> device_error 1 and no capacity series. A mount whose statvfs does not answer in time ->
stat_timeout 1 and no capacity or device_error series. A filesystem reporting 0 inodes (btrfs and
others with dynamic inodes) has no inode series. A prober that stops answering is killed (SIGKILL)
and replaced on the next scrape; a stat function that cannot be loaded fails the collector.
"""

from __future__ import annotations

import os
import re
import select
from dataclasses import dataclass

from ..exposition import counter, format_labels, gauge
from ..readers import on_kernel_fs, read_text
from ..registry import Collector, NoData, register
from .devices import regex_argument
from ..statprobe import DEFAULT_STAT_FUNCTION, REPLY_MARGIN, TIMED_OUT, StatError, StatProber, StatValues

# node_exporter's defaults, plus pseudo filesystems it lets through that have no capacity worth a
# series (efivarfs, nfsd, ramfs, rootfs) or whose stat is costly or surprising (autofs would mount).
DEFAULT_MOUNT_POINTS_EXCLUDE = r"^/(dev|proc|run/credentials/.+|sys|var/lib/docker/.+|var/lib/containers/storage/.+)($|/)"
DEFAULT_FS_TYPES_EXCLUDE = (
    r"^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|efivarfs|erofs|fusectl|"
    r"fuse\.gvfsd-fuse|fuse\.lxcfs|fuse\.portal|hugetlbfs|iso9660|mqueue|nfsd|nsfs|overlay|proc|procfs|"
    r"pstore|ramfs|rootfs|rpc_pipefs|securityfs|selinuxfs|squashfs|sysfs|tracefs)$")
DEFAULT_STAT_TIMEOUT = 0.5
# Local filesystems whose statfs answers from in-memory counters, never from a device or a server:
# they are stat'ed in the collector's own thread, sparing the prober round trip (~0.15 ms of CPU
# per scrape over both processes, a tenth of the agent's cost on a small node). Everything else
# (NFS, Lustre, GPFS, BeeGFS, CIFS, FUSE, btrfs, ...) goes to the prober child and its deadline.
# Should one of these ever block, the scrape wrapper still answers and reports the collector as
# failed (and still busy) rather than waiting.
IN_PROCESS_FS_TYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "tmpfs"})
ST_RDONLY = 1


@dataclass(frozen=True)
class Mount:
    device: str
    mountpoint: str
    fstype: str
    options: tuple[str, ...]  # per-mount and superblock options together

    @property
    def readonly(self) -> bool:
        return "ro" in self.options


_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape(field: str) -> str:
    """The kernel writes space, tab, newline and backslash in mount fields as \\040, \\011, \\012, \\134."""
    if "\\" not in field:
        return field
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """/proc/<pid>/mountinfo -> mounts in kernel order; malformed lines are skipped.

    `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`: fields 5 and 6
    are the mount point and per-mount options, then optional fields up to `-`, then fstype, source
    and superblock options.
    """
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 3 or len(fields) < 6:
            continue
        mountpoint = unescape(fields[4])
        if not mountpoint.startswith("/"):
            continue
        options = tuple(fields[5].split(",")) + tuple(fields[sep + 3].split(",") if len(fields) > sep + 3 else ())
        mounts.append(Mount(unescape(fields[sep + 2]), mountpoint, unescape(fields[sep + 1]), options))
    return mounts


def parse_mounts(text: str) -> list[Mount]:
    """/proc/mounts (fstab format: device mountpoint fstype options dump pass) -> mounts."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or not fields[1].startswith("/"):
            continue
        mounts.append(Mount(unescape(fields[0]), unescape(fields[1]), unescape(fields[2]), tuple(fields[3].split(","))))
    return mounts


@dataclass(frozen=True)
class Selection:
    fs_types_include: re.Pattern | None = None
    fs_types_exclude: re.Pattern | None = re.compile(DEFAULT_FS_TYPES_EXCLUDE)
    mount_points_include: re.Pattern | None = None
    mount_points_exclude: re.Pattern | None = re.compile(DEFAULT_MOUNT_POINTS_EXCLUDE)

    def wants(self, m: Mount) -> bool:
        if self.fs_types_include is not None and not self.fs_types_include.search(m.fstype):
            return False
        if self.fs_types_exclude is not None and self.fs_types_exclude.search(m.fstype):
            return False
        if self.mount_points_include is not None and not self.mount_points_include.search(m.mountpoint):
            return False
        if self.mount_points_exclude is not None and self.mount_points_exclude.search(m.mountpoint):
            return False
        return True


def select_mounts(mounts: list[Mount], selection: Selection) -> list[Mount]:
    """Wanted mounts, one per mount point: the last one listed, the one statvfs actually sees."""
    by_point: dict[str, Mount] = {}
    for m in mounts:
        by_point.pop(m.mountpoint, None)
        by_point[m.mountpoint] = m
    return [m for m in by_point.values() if selection.wants(m)]


def _regex(text: str | None) -> re.Pattern | None:
    return re.compile(text) if text else None


class _Target:
    """A selected mount with its label string and statvfs path, built once per mount-table change."""

    __slots__ = ("mount", "labels", "path", "in_process")

    def __init__(self, mount: Mount, labels: str, path: str, in_process: bool = False):
        self.mount, self.labels, self.path, self.in_process = mount, labels, path, in_process


def stat_in_process(path: str) -> StatValues | StatError:
    try:
        v = os.statvfs(path)
    except OSError as exc:
        return StatError(exc.errno or 0)
    return StatValues(v.f_bsize, v.f_frsize, v.f_blocks, v.f_bfree, v.f_bavail, v.f_files, v.f_ffree,
                      v.f_favail, v.f_flag)


@register
class FilesystemCollector(Collector):
    """Capacity and inodes of Lustre, GPFS, NFS, BeeGFS and local filesystems; hung mounts flagged, never waited on."""

    name = "filesystem"

    def __init__(self, ctx):
        super().__init__(ctx)
        opt = ctx.option
        self.selection = Selection(
            _regex(opt("collector_filesystem_fs_types_include", "")),
            _regex(opt("collector_filesystem_fs_types_exclude", DEFAULT_FS_TYPES_EXCLUDE)),
            _regex(opt("collector_filesystem_mount_points_include", "")),
            _regex(opt("collector_filesystem_mount_points_exclude", DEFAULT_MOUNT_POINTS_EXCLUDE)))
        # The reply must beat the scrape deadline (the prober adds up to REPLY_MARGIN), or the first
        # scrape after a mount hangs would fail the whole collector instead of flagging that mount.
        scrape_timeout = float(opt("scrape_timeout", 0.9) or 0.9)
        self.stat_timeout = max(0.05, min(float(opt("collector_filesystem_stat_timeout", DEFAULT_STAT_TIMEOUT)),
                                          scrape_timeout - REPLY_MARGIN - 0.1))
        # Not a command-line flag: tests name a stat function that hangs for chosen paths.
        stat_function = opt("collector_filesystem_stat_function", DEFAULT_STAT_FUNCTION)
        self.prober = StatProber(stat_function)
        # An injected stat function (tests) must see every mount, local ones included.
        self.in_process_types = IN_PROCESS_FS_TYPES if stat_function == DEFAULT_STAT_FUNCTION else frozenset()
        self._table: tuple[str, list[_Target]] = ("", [])
        self._watch: tuple[int, select.poll] | None = None  # the mount table's descriptor, polled
        self._unwatchable: set[str] = set()  # mount tables seen not to be on a real procfs

    @classmethod
    def add_arguments(cls, parser) -> None:
        add = parser.add_argument
        add("--collector.filesystem.fs-types-include", dest="collector_filesystem_fs_types_include",
            default="", type=regex_argument, metavar="REGEX",
            help="Only filesystem types matching this regex (e.g. '^(lustre|gpfs|nfs4?)$'); empty: all.")
        add("--collector.filesystem.fs-types-exclude", dest="collector_filesystem_fs_types_exclude",
            default=DEFAULT_FS_TYPES_EXCLUDE, type=regex_argument, metavar="REGEX",
            help="Filesystem types to leave out (pseudo filesystems, autofs, overlay).")
        add("--collector.filesystem.mount-points-include", dest="collector_filesystem_mount_points_include",
            default="", type=regex_argument, metavar="REGEX", help="Only mount points matching this regex; empty: all.")
        add("--collector.filesystem.mount-points-exclude", dest="collector_filesystem_mount_points_exclude",
            default=DEFAULT_MOUNT_POINTS_EXCLUDE, type=regex_argument, metavar="REGEX",
            help="Mount points to leave out.")
        add("--collector.filesystem.stat-timeout", dest="collector_filesystem_stat_timeout",
            default=DEFAULT_STAT_TIMEOUT, type=float, metavar="SECONDS",
            help="Seconds statvfs may take per scrape before a mount is reported as "
                 "gangwatch_filesystem_stat_timeout 1; capped at --scrape.timeout minus 0.3 s.")

    def _unchanged(self) -> bool:
        """Whether the watched mount table is known unchanged since it was last read."""
        if self._watch is None:
            return False
        try:
            if not self._watch[1].poll(0):
                return True
        except OSError:
            pass
        self._unwatch()  # changed (or unpollable): read it again, with a fresh watch
        return False

    def _watch_table(self, path: str) -> None:
        # Opened before the table is read, so that a change made after the read shows in the poll.
        if path in self._unwatchable:
            return
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        if not on_kernel_fs(fd, "proc"):
            os.close(fd)
            self._unwatchable.add(path)
            return
        poller = select.poll()
        poller.register(fd, select.POLLPRI)
        self._watch = (fd, poller)

    def _unwatch(self) -> None:
        if self._watch is not None:
            fd, self._watch = self._watch[0], None
            os.close(fd)

    def _targets(self) -> list[_Target]:
        if self._unchanged():
            return self._table[1]
        paths = self.ctx.paths
        for name, parse in (("1/mountinfo", parse_mountinfo), ("self/mountinfo", parse_mountinfo),
                            ("mounts", parse_mounts)):
            path = paths.proc(name)
            self._watch_table(path)
            text = read_text(path)
            if text:
                break
            self._unwatch()
        else:
            raise NoData(f"no mount table under {paths.procfs}")
        if text == self._table[0]:
            return self._table[1]  # the mount table rarely changes: labels and paths are reused
        targets = [
            _Target(m, format_labels((("device", m.device), ("mountpoint", m.mountpoint), ("fstype", m.fstype))),
                    paths.root(m.mountpoint), m.fstype in self.in_process_types)
            for m in select_mounts(parse(text), self.selection)]
        self._table = (text, targets)
        return targets

    def collect(self):
        targets = self._targets()
        remote = [t.path for t in targets if not t.in_process]
        outcomes = self.prober.probe(remote, self.stat_timeout) if remote else {}
        for t in targets:
            if t.in_process:
                outcomes[t.path] = stat_in_process(t.path)
        size = gauge("gangwatch_filesystem_size_bytes", "Filesystem size in bytes (statvfs f_blocks x f_frsize).")
        free = gauge("gangwatch_filesystem_free_bytes", "Free bytes, including those reserved for root (f_bfree x f_frsize).")
        avail = gauge("gangwatch_filesystem_avail_bytes", "Bytes available to unprivileged users (f_bavail x f_frsize).")
        files = gauge("gangwatch_filesystem_files", "Total inodes (f_files); absent where the filesystem reports 0.")
        files_free = gauge("gangwatch_filesystem_files_free", "Free inodes (f_ffree); absent where the filesystem reports 0 inodes.")
        readonly = gauge("gangwatch_filesystem_readonly", "1 when the filesystem is mounted read-only (mount options or statvfs ST_RDONLY).")
        timeout = gauge("gangwatch_filesystem_stat_timeout", "1 when statvfs did not answer within --collector.filesystem.stat-timeout "
                        "(a hung mount; it is not probed again until the stuck call returns), else 0.")
        error = gauge("gangwatch_filesystem_device_error", "1 when statvfs failed (permission denied, stale NFS handle, "
                      "transport endpoint not connected, I/O error), 0 when it answered; absent on a timeout.")
        for t in targets:
            lbl, out = t.labels, outcomes.get(t.path, TIMED_OUT)
            ro = t.mount.readonly
            if out is TIMED_OUT:
                timeout.add_rendered(lbl, 1)
            else:
                timeout.add_rendered(lbl, 0)
                error.add_rendered(lbl, 1 if isinstance(out, StatError) else 0)
                if isinstance(out, StatValues):
                    unit = out.frsize or out.bsize
                    size.add_rendered(lbl, out.blocks * unit)
                    free.add_rendered(lbl, out.bfree * unit)
                    avail.add_rendered(lbl, out.bavail * unit)
                    if out.files:
                        files.add_rendered(lbl, out.files)
                        files_free.add_rendered(lbl, out.ffree)
                    ro = ro or bool(out.flag & ST_RDONLY)
            readonly.add_rendered(lbl, 1 if ro else 0)
        restarts = counter("gangwatch_filesystem_prober_restarts_total",
                           "Times the statvfs prober child was replaced because it stopped answering or died.")
        restarts.add_rendered("", self.prober.restarts)
        return [size, free, avail, files, files_free, readonly, timeout, error, restarts]

    def close(self) -> None:
        self._unwatch()
        self.prober.close()
