#!/usr/bin/env bash
# Installs gangwatch into .venv and starts the demo: a simulated GPU cluster with the dashboard
# on http://127.0.0.1:8050 (no Prometheus or Slurm needed). Extra arguments go to `gangwatch demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GW_VENV:-$PWD/.venv}
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-venv
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[dashboard]" 2>&1 | grep -v "^WARNING: Location" || true
exec "$VENV/bin/gangwatch" demo "$@"
