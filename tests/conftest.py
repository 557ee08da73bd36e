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


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="Rewrite golden files from the current output instead of comparing.")


@pytest.fixture(scope="session")
def update_golden(request):
    return request.config.getoption("--update-golden")


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"shared fixtures not found at {FIXTURES} (set GW_SHARED)")
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
