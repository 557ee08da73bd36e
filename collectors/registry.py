"""The collector contract and the registry that turns each collector into `--collector.<name>` flags.

A collector is a class with a `name`, a `default_enabled` flag, a constructor taking a `Context`
(every outside dependency: filesystem roots, clock, command runner, NVML module, options) and a
`collect()` that yields `Family` objects. It raises `NoData` when its source does not exist on this
host (no InfiniBand card, no Lustre mount): that is quiet, not a failure. Any other exception marks
only that collector as failed for this scrape.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable

from .exposition import Family
from .quiet import ScrapeCadence
from .runner import CommandRunner


class NoData(Exception):
    """The collector's source is absent on this host; not an error."""


@dataclass(frozen=True)
class Paths:
    procfs: str = "/proc"
    sysfs: str = "/sys"
    rootfs: str = "/"

    def proc(self, *parts: str) -> str:
        return os.path.join(self.procfs, *parts)

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sysfs, *parts)

    def root(self, *parts: str) -> str:
        return os.path.join(self.rootfs, *(p.lstrip("/") for p in parts))


@dataclass
class Context:
    """Everything a collector may touch outside itself; tests build one over fixture trees."""

    paths: Paths = field(default_factory=Paths)
    clock: Callable[[], float] = time.time
    runner: CommandRunner = field(default_factory=CommandRunner)
    nvml: Any = None  # the pynvml module, or a fake with the same surface; None = import lazily
    options: dict[str, Any] = field(default_factory=dict)
    # how often this process is scraped (its Scraper records each scrape): how long a counter back
    # after standing still is shown at the value it stood at (quiet.QuietSeries)
    cadence: ScrapeCadence = field(default_factory=ScrapeCadence)

    def option(self, key: str, default: Any = None) -> Any:
        return self.options.get(key, default)


class Collector:
    name: ClassVar[str] = ""
    default_enabled: ClassVar[bool] = True
    # Seconds a collector may take before the scrape gives up on it (it keeps running in its
    # worker; the next scrape reports it as still busy rather than stacking another call).
    timeout: ClassVar[float] = 0.8

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def collect(self) -> Iterable[Family]:  # pragma: no cover - interface
        raise NotImplementedError

    @classmethod
    def add_arguments(cls, parser) -> None:
        """Collector-specific flags (e.g. `--collector.diskstats.device-exclude`)."""

    def close(self) -> None:
        """Release long-lived resources (NVML handles, prober processes)."""


REGISTRY: dict[str, type[Collector]] = {}


def register(cls: type[Collector]) -> type[Collector]:
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    REGISTRY[cls.name] = cls
    return cls


def load_builtin_collectors() -> dict[str, type[Collector]]:
    """Import every collector module so each registers itself; a module that fails to import is skipped."""
    import importlib
    import logging
    import pkgutil

    from . import node

    for mod in pkgutil.iter_modules(node.__path__):
        try:
            importlib.import_module(f"{node.__name__}.{mod.name}")
        except Exception as exc:  # one broken module must not take the agent down
            logging.getLogger(__name__).error("collector module %s failed to import: %s", mod.name, exc)
    return dict(sorted(REGISTRY.items()))
