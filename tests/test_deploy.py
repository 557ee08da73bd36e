"""deploy/: the agent's systemd unit, the Prometheus scrape config and the example web config are valid.

promtool (Debian's prometheus package) and systemd-analyze check the files as the real tools
would load them; the `node` relabeling is checked with Prometheus' own anchoring of the regex.
"""

from __future__ import annotations

import base64
import re
import subprocess

import pytest
import yaml

from collectors.web import WebConfig
from tests.conftest import REPO, which
from tests.test_web import openssl_cert

DEPLOY = REPO / "deploy"
SCRAPE = DEPLOY / "prometheus" / "agent-scrape.yml"
UNIT = DEPLOY / "systemd" / "gangwatch-agent.service"
WEB = DEPLOY / "web-config.example.yml"


def test_scrape_config_passes_promtool():
    promtool = which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    res = subprocess.run([promtool, "check", "config", str(SCRAPE)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("address, node", [
    ("gpu001.cluster.example.org:9810", "gpu001"),
    ("gpu001:9810", "gpu001"),
    ("10.1.2.3:9810", "10.1.2.3"),
    ("[fe80::1]:9810", "fe80"),
])
def test_node_label_relabeling(address, node):
    job = yaml.safe_load(SCRAPE.read_text())["scrape_configs"][0]
    rule = next(r for r in job["relabel_configs"] if r["target_label"] == "node")
    m = re.fullmatch(rule["regex"], address)  # Prometheus anchors relabel regexes at both ends
    assert m is not None
    assert rule["replacement"].replace("$1", m.group(1)) == node


def test_systemd_unit_verifies():
    analyze = which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed")
    res = subprocess.run([analyze, "verify", str(UNIT)], capture_output=True, text=True, timeout=60)
    # The one complaint allowed: the install path does not exist on the test machine.
    problems = [ln for ln in (res.stdout + res.stderr).splitlines()
                if ln.strip() and "is not executable: No such file or directory" not in ln]
    assert not problems, problems


def test_unit_is_hardened_but_keeps_what_the_agent_needs():
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    assert settings["DynamicUser"] == ["yes"] and settings["ProtectSystem"] == ["strict"]
    assert settings["NoNewPrivileges"] == ["yes"] and settings["CapabilityBoundingSet"] == [""]
    assert settings["ProtectHome"] == ["read-only"]  # statvfs of /home mounts must see the real ones
    assert "PrivateDevices" not in settings  # would hide the NVIDIA device nodes from NVML
    assert "char-nvidia-frontend rw" in settings["DeviceAllow"]
    assert "ProcSubset" not in settings  # /proc/pressure and /proc/net are not per-process
    assert "--web.listen-address=:9810" in settings["ExecStart"][0]


def test_example_web_config_loads(tmp_path):
    if which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    cert, key = openssl_cert(tmp_path, "server")
    text = WEB.read_text().replace("/etc/gangwatch/tls.crt", str(cert)).replace("/etc/gangwatch/tls.key", str(key))
    path = tmp_path / "web.yml"
    path.write_text(text)
    cfg = WebConfig.load(str(path))
    assert cfg.cert_file == str(cert) and "prometheus" in cfg.users
    assert cfg.authorized("Basic " + base64.b64encode(b"prometheus:change-me").decode())
