#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine (as root) and runs it all.
# Real components come from Debian's packages: promtool/prometheus, node_exporter, Alertmanager,
# Slurm (munge, slurmctld, slurmd, slurmdbd with MariaDB), Chromium. Python deps go into .venv.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${GW_VENV:-$ROOT/.venv}

APT_PACKAGES=(
  python3-venv curl ca-certificates openssl systemd util-linux
  prometheus prometheus-node-exporter prometheus-alertmanager
  slurm-wlm slurmdbd slurmrestd slurm-wlm-mysql-plugin slurm-wlm-jwt-plugin munge mariadb-server
  chromium victoria-metrics
  iperf3 perftest
  golang-go etcd-server golang-github-modern-go-reflect2-dev rsync jq make bc
)
# npm builds Grafana's dashboard schema; take Debian's only where no npm is on the PATH already.
command -v npm >/dev/null 2>&1 || APT_PACKAGES+=(npm)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/gangwatch-apt.log 2>&1 \
    || { echo "apt-get install failed; see /tmp/gangwatch-apt.log"; tail -20 /tmp/gangwatch-apt.log; }
fi
# Debian starts daemons from postinst where it can; the tests start their own on private ports.

if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  python3 -m venv "$VENV" || exit 1
fi
echo "== installing gangwatch and its test dependencies"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/python" -c "import dashboard.cli, collectors" || exit 1
# Grafana's dashboard JSON Schema for tests/test_grafana.py, built once from @grafana/schema (npm).
grafana/schema.sh >/dev/null || echo "Grafana dashboard schema not built: tests/test_grafana.py skips its schema check"

# kube-apiserver for tests/test_kube_*.py: built once per machine (~9 min on 2 cores) in the background
# while the rest of the suite runs; the kube tests run last and wait for its done-file.
# at the lowest priority, so the tests beside it keep their CPU
nice -n 19 tests/kube/ensure-apiserver.sh >/dev/null 2>&1 &

export PATH="$VENV/bin:$PATH"
# Everything the tests need was installed above: a skipped test would hide a missing component.
export GW_STRICT_SKIPS=1
echo "== running the test suite"
"$VENV/bin/python" -m pytest -q "$@"
rc=$?
# 5 = nothing collected: a wrong path or a broken conftest must not pass as a green run.
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: failing the run"
fi
exit $rc
