"""The metric reference (docs/metrics.md), generated from the collectors themselves so that it cannot drift.

    python -m collectors.doc                            # print the markdown
    python -m collectors.doc --write docs/metrics.md    # replace the block between the markers
    python -m collectors.doc --check docs/metrics.md    # exit 1 when its block is stale

Each registered collector runs, fail-soft, over every fixture tree in `../shared/fixtures` that can
stand in for a host (node_exporter's and prometheus/procfs' /proc and /sys, the Lustre exporters'
trees) with a fake NVML (tests/support/fake_nvml.py, an H100 node) and a command runner that
finds no commands; the table lists, per collector, the union of the families it emitted: name,
type and HELP text. A collector that emits nothing there but has recorded outputs of its own
under tests/data/ (RECORDED: BeeGFS, whose beegfs-ctl output no shared tree holds) runs once more
on those, its commands answered from the files. A collector that still emits nothing (it needs a
command such as mmpmon, or live hardware) is listed with a pointer to its module docstring. The
scrape framework's own series are listed first.

Needs a source checkout: the fixtures live beside it and the ttar unpacker and fake NVML under tests/.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .exposition import Family, encode, iter_samples
from .registry import Collector, Context, NoData, Paths, load_builtin_collectors
from .runner import CommandResult

START = "<!-- metrics-table:start -->"
END = "<!-- metrics-table:end -->"
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()


class NoCommands:
    """A CommandRunner stand-in: every command is absent, so output never depends on the machine."""

    def run(self, argv, timeout: float = 5.0, input: str | None = None) -> CommandResult:
        return CommandResult(tuple(argv), None, "", "", 0.0, error="FileNotFoundError: not run by collectors.doc")


class RecordedCommands:
    """A CommandRunner that answers each command with the file of the first (argv words, file) pair
    whose words are all in its argv, and finds no other command."""

    def __init__(self, outputs: tuple[tuple[tuple[str, ...], Path], ...]):
        self.outputs = outputs

    def run(self, argv, timeout: float = 5.0, input: str | None = None) -> CommandResult:
        for words, path in self.outputs:
            if set(words) <= set(argv):
                return CommandResult(tuple(argv), 0, path.read_text(), "", 0.0)
        return NoCommands().run(argv, timeout, input)


@dataclass(frozen=True)
class Recorded:
    """A collector's own test data standing in for a host: a procfs tree, its commands' outputs,
    and the options that point the collector there."""

    paths: Paths
    outputs: tuple[tuple[tuple[str, ...], Path], ...]
    options: tuple[tuple[str, object], ...] = ()


def _beegfs(data: Path) -> Recorded:
    meta, storage = "--nodetype=meta", "--nodetype=storage"
    return Recorded(Paths(procfs=str(data / "proc")),
                    ((("--listtargets", meta), data / "listtargets_meta.txt"),
                     (("--listtargets", storage), data / "listtargets_storage.txt"),
                     (("--serverstats", meta), data / "serverstats_meta.txt"),
                     (("--serverstats", storage), data / "serverstats_storage.txt"),
                     (("--clientstats",), data / "clientstats_storage.txt")),
                    (("collector_beegfs_ctl_path", str(data / "beegfs-ctl")), ("collector_beegfs_wait", 5.0)))


# collector name -> its recorded outputs, from the folder under tests/data/ named for it
RECORDED = {"beegfs": _beegfs}


def _ttar(archive: Path, dest: Path) -> None:
    sys.path.insert(0, str(REPO))
    from tests.support import ttar

    ttar.unpack(str(archive), str(dest))


def fixture_roots(shared: Path, tmp: Path) -> list[Paths]:
    """Paths of each fixture tree present; the two ttar archives are unpacked into `tmp`."""
    ne_sys = procfs_root = None
    if (shared / "node_exporter" / "sys.ttar").is_file():
        _ttar(shared / "node_exporter" / "sys.ttar", tmp / "node_exporter")
        ne_sys = tmp / "node_exporter" / "sys"
    if (shared / "prometheus_procfs" / "fixtures.ttar").is_file():
        _ttar(shared / "prometheus_procfs" / "fixtures.ttar", tmp / "procfs")
        procfs_root = tmp / "procfs" / "fixtures"
    return roots_from(shared, ne_sys, procfs_root)


def roots_from(shared: Path, ne_sys: Path | None, procfs_root: Path | None) -> list[Paths]:
    """Paths over already unpacked trees: node_exporter's sys (its proc is linked in place beside
    it, as node_exporter's own e2e test lays them out), prometheus/procfs' tree, and the Lustre
    exporters' trees read in place."""
    roots: list[Paths] = []
    if ne_sys is not None:
        root = ne_sys.parent
        if not (root / "proc").exists():
            os.symlink(shared / "node_exporter" / "proc", root / "proc")
        roots.append(Paths(str(root / "proc"), str(ne_sys), str(root)))
    if procfs_root is not None:
        roots.append(Paths(str(procfs_root / "proc"), str(procfs_root / "sys"), str(procfs_root)))
    for name in ("HewlettPackard_lustre_exporter", "GSI-HPC_lustre_exporter"):
        root = shared / name
        if (root / "proc").is_dir():
            roots.append(Paths(str(root / "proc"), str(root / "sys"), str(root)))
    return roots


def fake_nvml(shared: Path):
    """An H100 node from tests/support/fake_nvml.py, or None where that is unavailable."""
    try:
        sys.path.insert(0, str(REPO))
        from tests.support.fake_nvml import FakeNvml, h100_node

        gpus, driver = h100_node(shared)
        return FakeNvml(gpus, driver)
    except Exception:
        return None


def default_options() -> dict:
    """The agent's defaults, with every opt-in collector switch turned on so opt-in series are documented too."""
    import argparse

    from .agent import build_parser

    parser = build_parser()
    options = vars(parser.parse_args([]))
    for action in parser._actions:
        if isinstance(action, argparse._StoreTrueAction) and action.dest.startswith("collector_"):
            options[action.dest] = True
    return options


def run_one(cls: type[Collector], ctx: Context) -> list[Family]:
    from .scrape import run_collector

    try:
        collector = cls(ctx)
    except Exception:
        return []
    try:
        return run_collector(collector).families
    finally:
        try:
            collector.close()
        except Exception:
            pass


def gather(roots: list[Paths], shared: Path, collectors: dict[str, type[Collector]]) -> dict[str, list[Metric]]:
    """collector name -> its metric families (sorted by name), over every fixture tree."""
    options = default_options()
    # the ethtool ioctl would document this machine's NICs: read the captured `ethtool -S` texts instead
    options["collector_ethtool_fixtures"] = f"{shared / 'node_exporter' / 'ethtool'},{REPO / 'tests' / 'data' / 'ethtool'}"
    out: dict[str, dict[str, Metric]] = {name: {} for name in collectors}
    for paths in roots:
        for name, cls in collectors.items():
            ctx = Context(paths=paths, runner=NoCommands(), nvml=fake_nvml(shared), options=dict(options))
            _add(out[name], run_one(cls, ctx))
    for name, recorded in RECORDED.items():
        data = REPO / "tests" / "data" / name
        if name in collectors and not out[name] and data.is_dir():
            rec = recorded(data)
            ctx = Context(paths=rec.paths, runner=RecordedCommands(rec.outputs), nvml=None,
                          options={**options, **dict(rec.options)})
            _add(out[name], run_one(collectors[name], ctx))
    return {name: sorted(metrics.values(), key=lambda m: m.name) for name, metrics in out.items()}


def _add(seen: dict[str, Metric], families: list[Family]) -> None:
    """Merge the families a collector emitted into `seen` (name -> Metric): labels add up, the first HELP stays."""
    for fam in families:
        if fam.lines:
            was = seen.get(fam.name)
            labels = label_names(fam) | set(was.labels if was else ())
            seen[fam.name] = Metric(fam.name, fam.kind, (was or fam).help, tuple(sorted(labels)))


def label_names(fam: Family) -> set[str]:
    """Label names used by a family's samples, read back through the exposition parser."""
    return {k for _, labels, _ in iter_samples(encode([fam])) for k in labels}


class _Quiet(Collector):
    name = "quiet"

    def collect(self):
        raise NoData("stands in for any collector")


def framework_metrics() -> list[Metric]:
    """The series the scrape wrapper adds to every scrape, read from a scrape of one quiet collector."""
    from .scrape import Scraper, build_info

    scraper = Scraper([_Quiet(Context())], cache_ttl=0, static=[build_info("gangwatch", "agent")])
    try:
        text = scraper.collect_once().text
    finally:
        scraper.close()
    labels: dict[str, set[str]] = {}
    for name, lbl, _ in iter_samples(text):
        labels.setdefault(name, set()).update(lbl)
    return sorted((Metric(m.name, m.kind, m.help, tuple(sorted(labels.get(m.name, ()))))
                   for m in _families_of(text)), key=lambda m: m.name)


def _families_of(text: str) -> Iterable[Metric]:
    helps: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            helps[name] = help_text.replace("\\n", "\n").replace("\\\\", "\\")
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            yield Metric(name, kind, helps.get(name, ""))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(metrics: list[Metric]) -> list[str]:
    lines = ["| metric | type | labels | help |", "|---|---|---|---|"]
    lines += [f"| `{m.name}` | {m.kind} | {', '.join(m.labels)} | {_cell(m.help)} |" for m in metrics]
    return lines


def render(per_collector: dict[str, list[Metric]], framework: list[Metric],
           modules: dict[str, str] | None = None) -> str:
    modules = modules or {}
    total = sum(len(v) for v in per_collector.values())
    out = [f"<!-- generated by `python -m collectors.doc`; {total} families from "
           f"{len(per_collector)} collectors; do not edit by hand -->", "",
           "## Every scrape (the fail-soft wrapper)", ""]
    out += _table(framework)
    for name, metrics in per_collector.items():
        out += ["", f"## `{name}` collector", ""]
        if metrics:
            out += _table(metrics)
        else:
            where = modules.get(name, "its module")
            out.append(f"No series on the fixture trees (it needs a command or live hardware); see {where}.")
    return "\n".join(out) + "\n"


def default_shared() -> Path:
    return Path(os.environ.get("GW_SHARED", REPO.parent / "shared")) / "fixtures"


def generate(shared: Path, roots: list[Paths]) -> str:
    collectors = load_builtin_collectors()
    modules = {name: f"`{cls.__module__.replace('.', '/')}.py`" for name, cls in collectors.items()}
    return render(gather(roots, shared, collectors), framework_metrics(), modules)


def replace_block(readme: str, block: str) -> str:
    """Page text with the part between START and END replaced by `block`."""
    start = readme.find(START)
    end = readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"page has no {START} ... {END} block")
    return readme[:start + len(START)] + "\n" + block + readme[end:]


def current_block(readme: str) -> str:
    start = readme.find(START)
    end = readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"page has no {START} ... {END} block")
    return readme[start + len(START):end].lstrip("\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collectors.doc", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=None,
                    help="Folder holding the fixture trees (default: ../shared/fixtures, or $GW_SHARED/fixtures).")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="PAGE", type=Path, help="Rewrite the metric table block of PAGE (docs/metrics.md).")
    group.add_argument("--check", metavar="PAGE", type=Path, help="Exit 1 when the block of PAGE is stale.")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # collectors failing on trees that lack their files
    shared = args.shared or default_shared()
    with tempfile.TemporaryDirectory(prefix="gw-doc-") as tmp:
        block = generate(shared, fixture_roots(shared, Path(tmp)))
    if args.write:
        args.write.write_text(replace_block(args.write.read_text(), block))
    elif args.check:
        if current_block(args.check.read_text()) != block:
            print(f"{args.check}: the metric table is stale; run python -m collectors.doc --write {args.check}",
                  file=sys.stderr)
            return 1
    else:
        sys.stdout.write(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())

