"""Alert descriptions as the real vmalert renders them. promtool's unit tests (rules/tests/) render
every alert's templates in Prometheus' engine; vmalert runs the same Go templates, but its `query`
function asks VictoriaMetrics, whose MetricsQL differs (docs/victoriametrics.md). A description
whose query the two engines answer differently would say something else under vmalert: the alerts
whose template queries sum over several families are checked here, on the samples of their promtool
test, against the text promtool expects."""

from __future__ import annotations

import time

import pytest
import yaml

from tests.conftest import REPO
from tests.support import vmstack
from tests.support.promstack import free_port, wait_for

pytestmark = [pytest.mark.victoriametrics,
              pytest.mark.skipif(not vmstack.available(),
                                 reason="needs Debian's victoria-metrics (tests/run-all.sh installs it)")]

LABELS = 'job="gangwatch-agent",instance="gpu003:9810",node="gpu003"'


def _expected_description(test: str, alert: str) -> str:
    doc = yaml.safe_load((REPO / "rules" / "tests" / "ethernet_test.yml").read_text())
    case = next(t for t in doc["tests"] if t["name"] == test)
    return next(a["exp_alerts"][0]["exp_annotations"]["description"] for a in case["alert_rule_test"]
                if a["alertname"] == alert and a["exp_alerts"])


def test_pause_storm_description_in_vmalert(tmp_path):
    """NICPauseStorm over VictoriaMetrics: the storm guard's two counters of one NIC rose within the
    last 10 minutes (as in rules/tests/ethernet_test.yml at 25m), a second NIC's stood still."""
    now = time.time()
    lines = []
    for k in range(41):  # 10 minutes of 15 s scrapes up to now; the guard fires 5 and 4 minutes ago
        t, ago = round((now - 600 + 15 * k) * 1000), 600 - 15 * k
        warning, error = int(ago <= 300), int(ago <= 240)
        lines += [f'gangwatch_ethtool_transmitted_pause_storm_warning_events_total{{{LABELS},device="mlx5_0"}} {warning} {t}',
                  f'gangwatch_ethtool_transmitted_pause_storm_error_events_total{{{LABELS},device="mlx5_0"}} {error} {t}',
                  f'gangwatch_ethtool_transmitted_pause_storm_warning_events_total{{{LABELS},device="mlx5_1"}} 0 {t}',
                  f"gangwatch_ethtool_node_pause_storm_events_total{{{LABELS}}} {warning + error} {t}"]
    vm = vmstack.VictoriaMetrics(tmp_path)
    alert = None
    try:
        vm.import_text("\n".join(lines).encode() + b"\n")
        # rendering, not delivery, is what is checked: the notifier is a port nobody listens on
        alert = vmstack.VMAlert(tmp_path, [REPO / "rules" / "alerts.yml"], vm.url, f"http://127.0.0.1:{free_port()}")
        firing = wait_for(lambda: alert.alerts("firing", alertname="NICPauseStorm"), 30, "NICPauseStorm in vmalert",
                          context=lambda: str(alert.alerts())[:2000])
        assert firing[0]["labels"]["culprit"] == "gpu003" and firing[0]["labels"]["severity"] == "critical"
        assert firing[0]["annotations"]["description"] == _expected_description(
            "A PFC pause storm from a host that stopped draining its receive queues", "NICPauseStorm")
    finally:
        if alert is not None:
            alert.stop()
        vm.stop()
