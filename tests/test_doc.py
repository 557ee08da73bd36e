"""The metric reference (docs/metrics.md) is generated (`python -m collectors.doc`) and must stay in sync.

The test regenerates the table from every registered collector over the fixture trees and compares
it with the page's block between the markers; `pytest --update-golden` rewrites that block.
"""

from __future__ import annotations

import difflib

import pytest

from collectors import doc
from collectors.exposition import gauge
from tests.conftest import REPO

REFERENCE = REPO / "docs" / "metrics.md"


@pytest.fixture(scope="module")
def generated(node_exporter_sys, procfs_tree, fixtures_dir) -> str:
    return doc.generate(fixtures_dir, doc.roots_from(fixtures_dir, node_exporter_sys, procfs_tree))


def test_metric_reference_is_current(generated, update_golden):
    text = REFERENCE.read_text()
    if update_golden:
        REFERENCE.write_text(doc.replace_block(text, generated))
        return
    current = doc.current_block(text)
    if current != generated:
        diff = "".join(difflib.unified_diff(current.splitlines(True), generated.splitlines(True),
                                            "docs/metrics.md", "generated", n=0))
        pytest.fail("docs/metrics.md is stale: run `python -m collectors.doc --write docs/metrics.md` "
                    f"(or pytest --update-golden)\n{diff[:8000]}")


def test_every_collector_has_a_section_and_names_follow_the_convention(generated):
    from collectors.registry import load_builtin_collectors

    for name in load_builtin_collectors():
        assert f"## `{name}` collector" in generated
    for line in generated.splitlines():
        if line.startswith("| `"):
            metric, kind = line.split(" | ")[0][3:-1], line.split(" | ")[1]
            assert metric.startswith("gangwatch_"), metric
            assert kind in ("gauge", "counter", "untyped")
            assert (kind == "counter") == metric.endswith("_total"), (metric, kind)


def test_render_escapes_table_cells():
    fam = gauge("gangwatch_x_bytes", "Bytes | with a pipe\nand a newline.").add(1, device="a")
    metric = doc.Metric(fam.name, fam.kind, fam.help, tuple(sorted(doc.label_names(fam))))
    out = doc.render({"x": [metric], "y": []}, [], {"y": "`collectors/node/y.py`"})
    assert "| `gangwatch_x_bytes` | gauge | device | Bytes \\| with a pipe and a newline. |" in out
    assert "see `collectors/node/y.py`" in out


def test_replace_block_keeps_the_rest():
    text = f"before\n{doc.START}\nold\n{doc.END}\nafter\n"
    new = doc.replace_block(text, "new\n")
    assert new == f"before\n{doc.START}\nnew\n{doc.END}\nafter\n"
    assert doc.current_block(new) == "new\n"
    with pytest.raises(ValueError):
        doc.replace_block("no markers", "x")


def test_beegfs_is_documented_from_its_recorded_outputs(generated):
    """No shared tree holds beegfs-ctl output: the section comes from tests/data/beegfs (collectors.doc.RECORDED)."""
    section = generated.split("## `beegfs` collector", 1)[1].split("\n## ", 1)[0]
    names = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `")}
    assert {"gangwatch_beegfs_client_read_bytes_total", "gangwatch_beegfs_client_operations_total",
            "gangwatch_beegfs_target_reachability", "gangwatch_beegfs_target_consistency",
            "gangwatch_beegfs_server_requests", "gangwatch_beegfs_command_timeout",
            "gangwatch_beegfs_client_target_reachability"} <= names
    assert {"gangwatch_beegfs_meta_server_requests", "gangwatch_beegfs_meta_server_requests_per_second"} <= names
    runner = doc.RecordedCommands(((("--listtargets", "--nodetype=meta"), REPO / "tests/data/beegfs/listtargets_meta.txt"),))
    assert "meta" in runner.run(["beegfs-ctl", "--listtargets", "--nodetype=meta"]).stdout
    assert runner.run(["beegfs-ctl", "--listtargets", "--nodetype=storage"]).error
    assert runner.run(["beegfs-ctl", "--serverstats"]).error  # not recorded: absent, as NoCommands says
