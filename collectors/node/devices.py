"""Device include/exclude filters with node_exporter's semantics, and their `--collector.<name>.device-*` flags.

Not a collector: shared by the collectors that select devices by name (diskstats, netdev).
A device is kept when it does not match the exclude pattern and, if an include pattern is given,
matches it. Giving only an include pattern drops the collector's default exclude pattern, as
node_exporter does. Patterns are Python regexes searched anywhere in the name (anchor with ^...$).
"""

from __future__ import annotations

import argparse
import re

from ..exposition import format_labels


def regex_argument(text: str) -> str:
    """argparse `type=`: reject an invalid pattern at start-up rather than failing every scrape."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"invalid regular expression {text!r}: {exc}") from exc
    return text


class DeviceFilter:
    """Callable name -> the rendered label set `{device="name"}` when the device is kept, else None.

    Each name's verdict and label string are remembered: device names are few and stable, so the
    regexes and the label escaping run once per name rather than once per scrape.
    """

    def __init__(self, include: str | None = None, exclude: str | None = None, label: str = "device"):
        self.include = re.compile(include) if include else None
        self.exclude = re.compile(exclude) if exclude else None
        self.label = label
        self._seen: dict[str, str | None] = {}

    def __call__(self, name: str) -> str | None:
        try:
            return self._seen[name]
        except KeyError:
            pass
        keep = not (self.exclude and self.exclude.search(name)) and not (
            self.include and not self.include.search(name))
        rendered = format_labels(((self.label, name),)) if keep else None
        if len(self._seen) > 4096:  # device churn (veth pairs, hotplug) must not grow memory forever
            self._seen.clear()
        self._seen[name] = rendered
        return rendered

    @classmethod
    def from_options(cls, ctx, collector: str, default_exclude: str | None = None) -> "DeviceFilter":
        include = ctx.option(f"collector_{collector}_device_include")
        exclude = ctx.option(f"collector_{collector}_device_exclude")
        if exclude is None and not include:
            exclude = default_exclude
        return cls(include, exclude)


def add_device_filter_arguments(parser, collector: str, default_exclude: str | None = None) -> None:
    parser.add_argument(f"--collector.{collector}.device-include", dest=f"collector_{collector}_device_include",
                        type=regex_argument, default=None, metavar="REGEX",
                        help="Regexp of devices to include (searched in the name; anchor with ^...$).")
    when = f" (when no include pattern is given: {default_exclude})" if default_exclude else ""
    parser.add_argument(f"--collector.{collector}.device-exclude", dest=f"collector_{collector}_device_exclude",
                        type=regex_argument, default=None, metavar="REGEX",
                        help=f"Regexp of devices to exclude{when}.".replace("%", "%%"))
