#!/usr/bin/env python3
"""Lint the Helm chart docker/chart/truthscale with Helm's own lint (the helm-sdkpy package),
offline, for good values (each must pass) and hostile values (each must fail).

    python3 docker/chart-lint.py        (docker/check.sh runs it in its virtual environment)

helm-sdkpy's Lint takes a chart path and no values, so each case lints a copy of the chart
whose values.yaml is the chart's defaults with the case's values merged in. Lint renders every
template with those values and checks them against values.schema.json. A message of severity
warning or error fails a case (as `helm lint --strict`). helm-sdkpy cannot render the
manifests for us to read (no template action; install needs a cluster), so the rendered objects
are not validated here.
"""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
import sys
import tempfile
from pathlib import Path

import helm_sdkpy
import yaml  # PyYAML, which yamllint brings into docker/check.sh's virtual environment

CHART = Path(__file__).resolve().parent / "chart" / "truthscale"
SEVERITY = {0: "unknown", 1: "info", 2: "warning", 3: "error"}

GOOD = {
    "node (defaults)": {},
    "node, per-process, pod labels, ServiceMonitor": {
        "node": {"perProcess": True, "podLabels": ["app.kubernetes.io/name", "team"]},
        "monitor": {"kind": "ServiceMonitor", "labels": {"release": "kube-prometheus-stack"}},
    },
    "node, dcgm-exporter source, every rule set": {
        "source": "dcgm-exporter",
        "prometheusRule": {"ruleSets": {"dcgmExporter": True, "causes": True, "autoscaling": True}},
    },
    "sidecar": {"mode": "sidecar", "prometheusRule": {"ruleSets": {"showback": False}}},
    "sidecar, ServiceMonitor, release label": {
        "mode": "sidecar",
        "monitor": {"kind": "ServiceMonitor", "labels": {"release": "prometheus"}},
        "prometheusRule": {"labels": {"release": "prometheus"}},
    },
    "sidecar, dcgm-exporter source, no monitor": {"mode": "sidecar", "source": "dcgm-exporter", "monitor": {"kind": "none"}},
}

HUGE = "x" * 100_000
BAD = {
    "mode: daemonset": {"mode": "daemonset"},
    "port: -1": {"port": -1},
    "port: 70000": {"port": 70000},
    "port: a string": {"port": "9488"},
    "unknown top-level key": {"replicaCount": 3},
    "unknown key under node": {"node": {"hostNetwork": True}},
    "source: gpu": {"source": "gpu"},
    "monitor.kind: both": {"monitor": {"kind": "both"}},
    "honorLabels: a string": {"monitor": {"honorLabels": "yes"}},
    "huge image tag": {"image": {"tag": HUGE}},
    "huge image repository": {"image": {"repository": HUGE}},
    "huge extra label value": {"monitor": {"labels": {"release": HUGE}}},
    "huge workload name": {"mode": "sidecar", "sidecar": {"workload": {"name": HUGE}}},
    "pullPolicy: Sometimes": {"image": {"pullPolicy": "Sometimes"}},
    "negative replicas": {"mode": "sidecar", "sidecar": {"workload": {"replicas": -1}}},
}


def merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def lint(defaults: dict, values: dict) -> list[str]:
    """Helm's lint of the chart with `values` over the defaults: its findings of severity
    warning or error (empty when it passes)."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "truthscale"
        shutil.copytree(CHART, chart)
        (chart / "values.yaml").write_text(json.dumps(merge(defaults, values)))
        try:
            result = asyncio.run(helm_sdkpy.Lint(helm_sdkpy.Configuration(namespace="default")).run(str(chart)))
        except helm_sdkpy.exceptions.HelmError as e:
            return [f"lint error: {e}"]
    findings = [f"{SEVERITY.get(m['Severity'], m['Severity'])} {m['Path']}: {m.get('Err')}"
                for m in result.get("Messages") or [] if m["Severity"] >= 2]
    findings += [f"error: {e}" for e in result.get("Errors") or []]
    return findings


def main() -> int:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    failed = 0
    for name, values in GOOD.items():
        findings = lint(defaults, values)
        print(f"{'pass' if not findings else 'FAIL'}: {name}: lint {'passes' if not findings else 'fails'}")
        for f in findings:
            print(f"    {f[:300]}")
        failed += bool(findings)
    for name, values in BAD.items():
        findings = lint(defaults, values)
        print(f"{'pass' if findings else 'FAIL'}: {name}: lint {'fails, as it must' if findings else 'PASSES'}"
              + (f" ({findings[0][:160]})" if findings else ""))
        failed += not findings
    print(f"chart-lint: {len(GOOD)} good values pass, {len(BAD)} hostile values fail" if not failed
          else f"chart-lint: {failed} case(s) wrong", file=sys.stderr if failed else sys.stdout)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
