"""The chart's alert rules parse and do what they say, judged by Prometheus' own promtool.

`promtool check rules` on the rules file and on the PrometheusRule the chart renders
with other thresholds; `promtool test rules` runs epochlog.rules.test.yaml beside
this file: for each alert, input series under which it fires and others under which
it does not. promtool (Debian's 2.42) is put in the venv by `make venv`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import yaml

from tests.chart.chart import objects_of, one
from tests.monitoring.promql import RULES

PROMTOOL: Final = Path(sys.executable).parent / "promtool"
UNIT_TESTS: Final = Path(__file__).parent / "epochlog.rules.test.yaml"


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL.exists(), f"{PROMTOOL} is missing: `make venv` installs it"
    return subprocess.run(
        [str(PROMTOOL), *args], capture_output=True, text=True, check=False, cwd=cwd
    )


def _alerts(rules: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}


def test_the_rules_file_passes_promtool_check() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 5 rules found" in done.stdout
    assert set(_alerts(yaml.safe_load(RULES.read_text()))) == {
        "EpochlogPartitionOffline",
        "EpochlogPartitionsUnderMinIsr",
        "EpochlogBrokerFenced",
        "EpochlogBrokerStorageFault",
        "EpochlogCertificateExpiresSoon",
    }


def test_each_alert_fires_when_it_should_and_not_otherwise() -> None:
    done = promtool("test", "rules", UNIT_TESTS.name, cwd=UNIT_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    tested = {
        t["alertname"]
        for case in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
        for t in case["alert_rule_test"]
    }
    assert tested == set(_alerts(yaml.safe_load(RULES.read_text())))


def test_the_rendered_prometheus_rule_with_other_thresholds_passes_promtool_check(
    tmp_path: Path,
) -> None:
    values = {
        "monitoring": {
            "prometheusRule": {"enabled": True},
            "alerts": {
                "underMinIsrFor": "90s",
                "brokerFencedFor": "1h",
                "certificateExpiryDays": 7,
            },
        }
    }
    rule = one(objects_of(values), "PrometheusRule")
    rendered = tmp_path / "rendered.rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    done = promtool("check", "rules", str(rendered))
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = _alerts(rule["spec"])
    assert alerts["EpochlogPartitionsUnderMinIsr"]["for"] == "90s"
    assert alerts["EpochlogBrokerFenced"]["for"] == "1h"
    assert alerts["EpochlogCertificateExpiresSoon"]["expr"].endswith("< 7 * 86400")
