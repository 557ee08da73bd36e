"""The data layer as a package: every implementation provides the whole `Datasource` protocol, the
package keeps its public names, and `leaf_of` answers from the metric source's switch labels or,
without them, from Slurm's topology/tree in the snapshot ("" when neither knows)."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from collectors.slurm.model import Switch
from dashboard import datasource
from dashboard.analysis.window import Window
from dashboard.datasource import Datasource, LiveDatasource, MemoryDatasource, SimDatasource
from dashboard.ui import Ctx
from tests.support import dashboard_fake
from tests.support.dashboard_fake import NODES, NOW

REPO = Path(__file__).resolve().parent.parent
PROTOCOL = sorted(n for n, v in vars(Datasource).items() if callable(v) and not n.startswith("_"))


def test_protocol_names_what_pages_ask():
    """Every `ds.<name>` a page calls is on the protocol: pages never probe for a feature."""
    called = set()
    for path in (REPO / "dashboard" / "pages").glob("*.py"):
        text = path.read_text()
        assert not re.search(r"(getattr|hasattr)\(\s*ds\b", text), f"{path.name} probes the datasource"
        called |= set(re.findall(r"\bds\.([a-z_]+)\(", text))
    assert "leaf_of" in called and called <= set(PROTOCOL), sorted(called - set(PROTOCOL))


@pytest.mark.parametrize("cls", [MemoryDatasource, SimDatasource, LiveDatasource])
def test_every_implementation_provides_the_protocol(cls):
    missing = [n for n in PROTOCOL if not callable(getattr(cls, n, None))]
    assert not missing, f"{cls.__name__} lacks {missing}"


def test_package_reexports_its_public_names():
    """Existing `from dashboard.datasource import X` keep working after the split."""
    defined = set()
    for path in (REPO / "dashboard" / "datasource").glob("*.py"):
        if path.name == "__init__.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and not node.name.startswith("_"):
                defined.add(node.name)
    assert defined <= set(datasource.__all__), sorted(defined - set(datasource.__all__))
    assert all(hasattr(datasource, n) for n in datasource.__all__)


def test_leaf_of_from_slurm_topology_without_metrics():
    """`serve --snapshot` with topology/tree: the job page counts the switches instead of "unknown"."""
    snap = replace(dashboard_fake.snapshot(), switches=(
        Switch("leaf-a", 0, None, tuple(NODES[0:2])), Switch("leaf-b", 0, None, tuple(NODES[2:4])),
        Switch("spine", 1, None, tuple(NODES[0:4]), ("leaf-a", "leaf-b"))))
    ds = MemoryDatasource(snap, dashboard_fake.findings(), simulated=False)
    assert [ds.leaf_of(n) for n in NODES[:5]] == ["leaf-a", "leaf-a", "leaf-b", "leaf-b", ""]
    assert MemoryDatasource(dashboard_fake.snapshot()).leaf_of(NODES[0]) == ""  # no topology: unknown
    assert MemoryDatasource(None).leaf_of(NODES[0]) == ""

    from dashboard.app import build_app, render_page
    from tests.test_dashboard_layout import strings

    app = build_app(ds)
    text = " ".join(strings(render_page(ds, Ctx(app.get_relative_path), "jobs/4001")))
    assert "2 nodes on 1 leaf switch(es)." in text and "leaf switches unknown" not in text
    node = " ".join(strings(render_page(ds, Ctx(app.get_relative_path), f"nodes/{NODES[2]}")))
    assert "leaf-b" in node


def test_live_leaf_of_prefers_the_metric_source_labels():
    snap = replace(dashboard_fake.snapshot(), switches=(Switch("slurm-leaf", 0, None, tuple(NODES[0:2])),))
    win = Window(np.array([NOW - 15.0, NOW]), 15.0, tuple(NODES[0:2]), leaf_of={NODES[0]: "ib-leaf"})

    class Metrics:
        name = "test"

        def window(self):
            return win

    ds = LiveDatasource(lambda: snap, "test snapshot", clock=lambda: NOW, metrics=Metrics())
    assert ds.leaf_of(NODES[0]) == "slurm-leaf"  # no window yet: Slurm's topology
    ds.refresh_metrics()
    assert [ds.leaf_of(n) for n in NODES[:3]] == ["ib-leaf", "slurm-leaf", ""]
