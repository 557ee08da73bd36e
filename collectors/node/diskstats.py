"""Block device I/O statistics from `/proc/diskstats`: enough for iostat's r/s, w/s, await, aqu-sz, %util.

Source: `<procfs>/diskstats` (world-readable; no privileges). Lines carry 14 fields (kernels before
4.18), 18 (discards added) or 20 (flushes added, 5.5+): major, minor, name, then the counters of
Documentation/admin-guide/iostats.rst. Sectors there are always 512 bytes, whatever the device's
own sector size; times are milliseconds.
Metrics (label `device`), named as node_exporter's `node_disk_*` with the `gangwatch_disk_` prefix:
reads/writes completed and merged, read/written bytes, read/write time, `io_time_seconds_total`
(time the device had I/O in flight, for %util), `io_time_weighted_seconds_total` (for aqu-sz),
`io_now` (requests in flight); where the kernel has them, discards (completed, merged, bytes, time)
and flushes (completed, time). Discarded sectors are exported as bytes (node_exporter exports sectors).
Flags: `--collector.diskstats.device-include` / `--collector.diskstats.device-exclude` (regexes,
matched against the whole device name). By default partitions, RAM disks, loop and floppy devices are
left out: node_exporter's default pattern, plus eMMC/SD partitions (`mmcblk0p1`), which it lets in.
Giving only an include pattern drops the default exclude pattern, as node_exporter does (devices.py).
Failure modes: an unreadable file fails the collector; a file with lines but none parsable fails
it too; an empty file means no block devices (success, no series); a short or garbled line drops
that device only; a repeated device keeps its first line.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ..exposition import counter, gauge
from ..readers import read_required
from ..registry import Collector, register
from .devices import DeviceFilter, add_device_filter_arguments

SECTOR_BYTES = 512
DEFAULT_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p|mmcblk\d+p)\d+$"


class DiskStats(NamedTuple):
    device: str
    counters: tuple[int, ...]  # 11, 15 or 17 values in the kernel's order


def parse_diskstats(text: str, keep: Callable[[str], object] | None = None) -> list[DiskStats]:
    """`/proc/diskstats` text -> one record per device with at least the 11 classic counters; never raises.

    `keep(device)` falsy skips a device before its numbers are converted: hosts with dozens of
    loop devices pay nothing for them.
    """
    out: list[DiskStats] = []
    seen: set[str] = set()
    for line in text.split("\n"):
        parts = line.split()
        if len(parts) < 14:
            continue  # 2.6-era partition lines (7 fields) mean something else; truncated lines too
        device = parts[2]
        if device in seen or (keep is not None and not keep(device)):
            continue
        try:
            values = tuple(map(int, parts[3:20]))
        except ValueError:
            continue
        seen.add(device)
        out.append(DiskStats(device, values))
    return out


# (index in counters, metric name, kind, help, scale): scale None keeps the integer, an int
# multiplies (sectors -> bytes), _MS divides milliseconds into seconds (v / 1000 gives the float
# nearest the true value; node_exporter's v * 0.001 can differ in the last bit).
_MS = "ms"
FIELDS = (
    (0, "gangwatch_disk_reads_completed_total", counter, "Total number of reads completed successfully.", None),
    (1, "gangwatch_disk_reads_merged_total", counter,
     "Total number of adjacent reads merged into one before being issued to the device.", None),
    (2, "gangwatch_disk_read_bytes_total", counter, "Total number of bytes read successfully.", SECTOR_BYTES),
    (3, "gangwatch_disk_read_time_seconds_total", counter, "Total seconds spent by all reads (from issue to completion).", _MS),
    (4, "gangwatch_disk_writes_completed_total", counter, "Total number of writes completed successfully.", None),
    (5, "gangwatch_disk_writes_merged_total", counter,
     "Total number of adjacent writes merged into one before being issued to the device.", None),
    (6, "gangwatch_disk_written_bytes_total", counter, "Total number of bytes written successfully.", SECTOR_BYTES),
    (7, "gangwatch_disk_write_time_seconds_total", counter, "Total seconds spent by all writes (from issue to completion).", _MS),
    (8, "gangwatch_disk_io_now", gauge, "Number of I/O requests currently in flight to the device.", None),
    (9, "gangwatch_disk_io_time_seconds_total", counter,
     "Total seconds the device had at least one I/O request in flight (rate x 100 = iostat %util).", _MS),
    (10, "gangwatch_disk_io_time_weighted_seconds_total", counter,
     "Total seconds spent doing I/O weighted by the number of requests in flight (rate = iostat aqu-sz).", _MS),
    (11, "gangwatch_disk_discards_completed_total", counter, "Total number of discards completed successfully.", None),
    (12, "gangwatch_disk_discards_merged_total", counter, "Total number of adjacent discards merged.", None),
    (13, "gangwatch_disk_discarded_bytes_total", counter, "Total number of bytes discarded successfully.", SECTOR_BYTES),
    (14, "gangwatch_disk_discard_time_seconds_total", counter, "Total seconds spent by all discards.", _MS),
    (15, "gangwatch_disk_flush_requests_total", counter, "Total number of flush requests completed successfully.", None),
    (16, "gangwatch_disk_flush_requests_time_seconds_total", counter, "Total seconds spent by all flush requests.", _MS),
)


@register
class DiskstatsCollector(Collector):
    """Block device I/O counters from /proc/diskstats (iostat's raw material), partitions left out by default."""

    name = "diskstats"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.keep = DeviceFilter.from_options(ctx, "diskstats", DEFAULT_EXCLUDE)

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_device_filter_arguments(parser, "diskstats", DEFAULT_EXCLUDE)

    def collect(self):
        path = self.ctx.paths.proc("diskstats")
        text = read_required(path)
        disks = parse_diskstats(text, self.keep)
        if not disks and text.strip() and not parse_diskstats(text):
            raise ValueError(f"no parsable lines in {path}")
        fams = [kind(name, help) for _, name, kind, help, _ in FIELDS]
        adds = [f.add_rendered for f in fams]
        specs = [(i, adds[k], scale) for k, (i, _, _, _, scale) in enumerate(FIELDS)]
        for d in disks:
            lbl = self.keep(d.device)
            if lbl is None:
                continue
            values = d.counters
            for i, add, scale in specs[:len(values)]:
                v = values[i]
                add(lbl, v if scale is None else v / 1000 if scale is _MS else v * scale)
        return fams
