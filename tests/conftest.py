import os
import shutil
import tarfile
from pathlib import Path

import pytest

from tests.support import ttar

REPO = Path(__file__).resolve().parent.parent
# Third-party captures are read in place from ../shared (read-only in CI); never copied into the repo.
SHARED = Path(os.environ.get("GW_SHARED", REPO.parent / "shared")).resolve()
FIXTURES = SHARED / "fixtures"
ARTIFACTS = REPO / "tests" / "artifacts"


# Under the README's test command (tests/run-all.sh sets GW_STRICT_SKIPS=1, having installed every
# real component) a skipped test means a missing install step, so it fails instead. A skip whose
# reason starts with NOT_APPLICABLE (e.g. "this host has an NVIDIA driver") stays a skip.
STRICT_SKIPS = os.environ.get("GW_STRICT_SKIPS") == "1"
NOT_APPLICABLE = "not applicable here:"


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_skip(report) -> None:
    reason = _skip_reason(report)
    if STRICT_SKIPS and report.skipped and NOT_APPLICABLE not in reason:
        report.outcome = "failed"
        report.longrepr = f"skipped under GW_STRICT_SKIPS=1 (a real component is missing?): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skip(outcome.get_result())


def pytest_collection_modifyitems(config, items):
    # the kube-apiserver is built in the background while the rest runs (tests/run-all.sh): its tests go last
    items.sort(key=lambda item: item.get_closest_marker("kube") is not None)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="Rewrite golden files from the current output instead of comparing.")


@pytest.fixture(scope="session")
def update_golden(request):
    return request.config.getoption("--update-golden")


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    # A plain clone has no ../shared: the tests built on third-party captures skip there (and the
    # strict-skip hook keeps them skips); everything else still runs. docs say how to get them.
    if not FIXTURES.is_dir():
        pytest.skip(f"{NOT_APPLICABLE} third-party fixtures absent (no {FIXTURES}; set GW_SHARED to the "
                    "folder holding fixtures/, see CONTRIBUTING.md)")
    return FIXTURES


@pytest.fixture(scope="session")
def node_exporter_sys(tmp_path_factory, fixtures_dir) -> Path:
    """node_exporter's fake /sys, unpacked from sys.ttar into a temp dir (returns the `sys` folder)."""
    dest = tmp_path_factory.mktemp("ne-sys")
    ttar.unpack(str(fixtures_dir / "node_exporter" / "sys.ttar"), str(dest))
    return dest / "sys"


@pytest.fixture(scope="session")
def procfs_tree(tmp_path_factory, fixtures_dir) -> Path:
    """prometheus/procfs' whole fixture tree unpacked (returns the folder holding proc/ and sys/)."""
    dest = tmp_path_factory.mktemp("procfs")
    ttar.unpack(str(fixtures_dir / "prometheus_procfs" / "fixtures.ttar"), str(dest))
    return dest / "fixtures"


def unpack_tar(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tf:
        tf.extractall(dest, filter="data")
    return dest


def which(name: str) -> str | None:
    return shutil.which(name)
