"""A real, throw-away Slurm cluster for the `slurm`-marked tests (munge, slurmctld, 8 `slurmd -N`
GPU nodes, optionally slurmdbd + MariaDB), driven by the scripts in tests/slurm/ (adapted from
../shared/recipes/slurm). Everything lives under one private folder and private ports, and is
stopped by PID at the end (no pkill)."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent / "slurm"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol")


def unavailable_reason() -> str | None:
    """Why a live cluster cannot be started here, or None."""
    if os.geteuid() != 0:
        return "the live Slurm tests need root (they start munged/slurmd and create test users)"
    missing = [b for b in DAEMONS if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        return f"Slurm packages missing ({', '.join(missing)}); tests/run-all.sh installs them"
    for tool in ("runuser", "useradd"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return None


def pytest_marks() -> list:
    """A test module's `pytestmark`: `slurm`, plus a skip saying why where no cluster can start here."""
    import pytest

    reason = unavailable_reason()
    return [pytest.mark.slurm] + ([pytest.mark.skip(reason=reason)] if reason else [])


def started(cluster: "SlurmCluster", populate: bool = False):
    """The body of a module fixture: start (and populate) `cluster`, yield it, stop it."""
    try:
        cluster.start()
        if populate:
            cluster.populate()
    except Exception:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


def have_dbd() -> bool:
    return all(shutil.which(b) or Path("/usr/sbin", b).exists() for b in ("slurmdbd", "mariadbd", "mariadb-install-db"))


def have_jwt() -> bool:
    """auth/jwt is a separate Debian package (slurm-wlm-jwt-plugin); without it slurmctld dies at start."""
    import glob
    return bool(glob.glob("/usr/lib/*/slurm-wlm/auth_jwt.so") or glob.glob("/usr/lib*/slurm/auth_jwt.so"))


def _ports_free(base: int, offsets) -> bool:
    for off in offsets:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", base + off))
            except OSError:
                return False
    return True


def pick_port_base(start: int | None = None) -> int:
    """GW_SLURM_PORT_BASE, else the first of 17800, 18000, ... whose ports are all free."""
    if os.environ.get("GW_SLURM_PORT_BASE"):
        return int(os.environ["GW_SLURM_PORT_BASE"])
    base = start or 17800
    for _ in range(20):
        if _ports_free(base, list(range(6, 31))):
            return base
        base += 200
    raise RuntimeError("no free port range for the test Slurm")


class SlurmCluster:
    def __init__(self, state_dir: str | None = None, port_base: int | None = None, dbd: bool | None = None,
                 sim_nodes: int = 0, max_jobs: int = 10000, jwt: bool | None = None, topology: str | None = None,
                 slurmd: bool = True):
        self.dir = Path(state_dir or os.environ.get("GW_SLURM_DIR") or f"/tmp/gw-slurm-t{os.getpid()}")
        self.port_base = port_base or pick_port_base()
        self.dbd = have_dbd() if dbd is None else dbd
        self.sim_nodes = sim_nodes
        self.max_jobs = max_jobs
        self.jwt = have_jwt() if jwt is None else jwt
        self.topology = topology  # a topology.conf to run topology/tree with
        self.slurmd = slurmd  # False: slurmctld alone (nodes stay UNKNOWN), a cluster in seconds
        self._procs: list[subprocess.Popen] = []
        self.jobs: dict[str, int] = {}
        self.started = False
        self.restd_socket: str | None = None
        self.restd_pid: int | None = None

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(GW_SLURM_DIR=str(self.dir), GW_SLURM_PORT_BASE=str(self.port_base),
                   GW_SLURM_DBD="1" if self.dbd else "0", GW_SLURM_SIM_NODES=str(self.sim_nodes),
                   GW_SLURM_MAXJOBS=str(self.max_jobs), SLURM_CONF=str(self.dir / "etc" / "slurm.conf"),
                   GW_SLURM_JWT="1" if self.jwt else "0",
                   GW_SLURM_DELUSERS="1", GW_SLURM_TOPOLOGY=self.topology or "",
                   GW_SLURM_SLURMD="1" if self.slurmd else "0")
        return env

    def _script(self, name: str, timeout: float, *args: str) -> str:
        proc = subprocess.run(["bash", str(HERE / name), *args], env=self.env, cwd="/tmp", capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc.stdout

    def start(self) -> None:
        if self.dir.exists():
            self._script("stop.sh", 120)  # a leftover of an interrupted run
        atexit.register(self.stop)
        self.started = True
        self._script("start.sh", 120)

    def populate(self) -> None:
        self._script("populate.sh", 180)
        for line in (self.dir / "jobs.env").read_text().split():
            k, _, v = line.partition("=")
            if v.isdigit():
                self.jobs[k] = int(v)

    def run(self, *argv: str, timeout: float = 20.0, check: bool = True) -> str:
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{argv} failed: {proc.stderr}")
        return proc.stdout

    def pid(self, daemon: str) -> int | None:
        f = self.dir / "run" / f"{daemon}.pid"
        try:
            return int(f.read_text().strip())
        except (OSError, ValueError):
            return None

    def start_slurmrestd(self, user: str = "alice") -> str:
        """slurmrestd on a unix socket under the state dir (rest_auth/local); returns the socket path."""
        restd = self.dir / "restd"
        restd.mkdir(exist_ok=True)
        shutil.chown(restd, user)
        sock = restd / "slurmrestd.sock"
        plugins = "openapi/v0.0.38,openapi/dbv0.0.38" if self.dbd else "openapi/v0.0.38"
        log = open(self.dir / "log" / "slurmrestd.log", "w")
        proc = subprocess.Popen(["slurmrestd", "-u", user, "-g", user, "-a", "rest_auth/local", "-s", plugins,
                                 f"unix:{sock}"], env=self.env, stdout=log, stderr=log, start_new_session=True)
        (self.dir / "run" / "slurmrestd.pid").write_text(str(proc.pid))  # stop.sh stops it by PID
        self.restd_pid = proc.pid
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.1)
        self.restd_socket = str(sock)
        return str(sock)

    def start_slurmrestd_jwt(self, user: str = "alice") -> tuple[str, str]:
        """slurmrestd on 127.0.0.1:<base+30> with rest_auth/jwt; returns (url, token for `user`)."""
        token = self.run("scontrol", "token", f"username={user}", "lifespan=900").strip()
        token = token.split("=", 1)[1] if token.startswith("SLURM_JWT=") else token
        port = self.port_base + 30
        plugins = "openapi/v0.0.38,openapi/dbv0.0.38" if self.dbd else "openapi/v0.0.38"
        log = open(self.dir / "log" / "slurmrestd-jwt.log", "w")
        env = dict(self.env, SLURM_JWT="daemon")
        proc = subprocess.Popen(["slurmrestd", "-u", user, "-g", user, "-a", "rest_auth/jwt", "-s", plugins,
                                 f"127.0.0.1:{port}"], env=env, stdout=log, stderr=log, start_new_session=True)
        self._procs.append(proc)
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        return f"http://127.0.0.1:{port}", token

    def stop(self) -> None:
        for proc in self._procs:  # our own children, stopped by handle
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        self._procs.clear()
        if not self.started:
            return
        self.started = False
        try:
            self._script("stop.sh", 120)
        except Exception as exc:  # never hide the test result behind a teardown error
            print(f"slurm stop failed: {exc}")

    def signal_ctld(self, sig: int) -> None:
        pid = self.pid("slurmctld")
        if pid:
            os.kill(pid, sig)

    def freeze_ctld(self) -> None:
        """SIGSTOP slurmctld: every client command then hangs until its timeout (a 'slow' controller)."""
        self.signal_ctld(signal.SIGSTOP)

    def thaw_ctld(self) -> None:
        self.signal_ctld(signal.SIGCONT)

    def kill_ctld(self, timeout: float = 15.0) -> None:
        """SIGKILL slurmctld (a crash: no state saved beyond what it had written) and wait for it to go."""
        pid = self.pid("slurmctld")
        if not pid:
            return
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        raise RuntimeError(f"slurmctld {pid} still alive after SIGKILL")

    def start_ctld(self, timeout: float = 60.0) -> None:
        """Start slurmctld again on its saved state (after kill_ctld) and wait until it answers."""
        subprocess.run(["slurmctld"], env=self.env, cwd="/tmp", check=True, capture_output=True, timeout=30)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if subprocess.run(["scontrol", "ping"], env=self.env, capture_output=True, timeout=30).returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError("slurmctld did not answer `scontrol ping` after a restart")
