#!/usr/bin/env python3
"""Lint the Helm chart docker/chart/truthscale with Helm's own lint (the helm-sdkpy package),
offline, for good values (each must pass) and hostile values (each must be refused).

    python3 docker/chart-lint.py        (docker/check.sh runs it in its virtual environment)

helm-sdkpy's Lint takes a chart path and no values, so each case lints a copy of the chart
whose values.yaml is the chart's defaults with the case's values merged in. Lint renders every
template with those values and checks them against values.schema.json. A message of severity
warning or error fails a case (as `helm lint --strict`). A hostile case is refused when lint
fails, or else when Helm's install (below) does: lint runs the templates' `fail` in lint mode,
where it only logs, so a combination the templates refuse (node.perProcess without NVML, the
NVML sidecar without GPU access) fails at install, with the message BAD_MESSAGES names.

helm-sdkpy has no template action and its install needs an API server, so the good cases are
also installed against FakeApiServer below, a stand-in on 127.0.0.1 that answers discovery
and keeps what Helm creates: the objects exactly as Helm renders them. Those are checked
(what each mode and value must and must not render: GPU access with the NVML source only,
`--listen` from listenAddress and port, liveness everywhere but readiness in node mode only; the
rules and dashboards against their sources) and the built-in kinds validated with
kubernetes-validate --strict. The pod-label keys of docker/chart-lint-pod-label-keys.json, which
tests/tests/it/node_manifests.rs gives the agent, must pass (all at once) or fail (each alone).
The release's manifest, the YAML text Helm rendered, must hold no mapping key twice (Helm
keeps the last of two; kustomize and `kubectl apply` refuse the document). A case may name its release (a
release "123" is a number to YAML unless the templates quote it) or install against a stand-in
without the Prometheus Operator's CRDs (monitoring.coreos.com/v1): the monitor and the rules
must then be left out.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import helm_sdkpy
import yaml  # PyYAML, which yamllint brings into docker/check.sh's virtual environment

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "docker" / "chart" / "truthscale"
SEVERITY = {0: "unknown", 1: "info", 2: "warning", 3: "error"}

GPU_UUID = "GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
# The image tag when values.yaml gives none: the chart's appVersion.
CHART_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]

# Pod label keys that values.schema.json must accept (all at once, a good case) and refuse
# (each a hostile case), as the agent does: tests/tests/it/node_manifests.rs checks the agent
# against the same file.
LABEL_KEYS = json.loads((ROOT / "docker" / "chart-lint-pod-label-keys.json").read_text())


def short(key: str) -> str:
    """A key for a case's name: a long one by its length."""
    return repr(key) if len(key) <= 24 else f"{key[:12]!r}... ({len(key)} characters)"


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
    "sidecar (nvml, the inference container's GPU)": {"mode": "sidecar", "sidecar": {"visibleDevices": GPU_UUID}},
    "sidecar, ServiceMonitor, release label, no runtime class": {
        "mode": "sidecar",
        "sidecar": {"visibleDevices": f"{GPU_UUID},MIG-5e6f7a8b-9c0d-5e1f-a2b3-c4d5e6f7a8b9", "runtimeClassName": ""},
        "monitor": {"kind": "ServiceMonitor", "labels": {"release": "prometheus"}},
        "prometheusRule": {"labels": {"release": "prometheus"}},
    },
    "node, no rules, no dashboards, no monitor": {
        "monitor": {"kind": "none"}, "prometheusRule": {"enabled": False}, "dashboards": {"enabled": False},
    },
    "sidecar, dcgm-exporter source, no monitor": {"mode": "sidecar", "source": "dcgm-exporter", "monitor": {"kind": "none"}},
    "sidecar, dcgm-exporter source, the pod's GPUs named": {
        "mode": "sidecar", "source": "dcgm-exporter", "sidecar": {"gpuUuids": f"{GPU_UUID},GPU-1"},
    },
    "node, sim source, another grafana_dashboard value": {"source": "sim", "dashboards": {"labels": {"grafana_dashboard": "true"}}},
    # Names YAML reads as numbers unless quoted; release "123" too (CASE_OPTIONS).
    "sidecar, sim source, numeric names": {
        "mode": "sidecar", "source": "sim",
        "sidecar": {"workload": {"name": "123", "containerName": "456", "image": "1e3"}},
    },
    "node, cluster without the Prometheus Operator's CRDs": {},
    "sidecar, ServiceMonitor, cluster without the Prometheus Operator's CRDs": {
        "mode": "sidecar", "source": "sim", "monitor": {"kind": "ServiceMonitor"},
    },
    "node, every pod-label key the agent accepts": {"node": {"podLabels": LABEL_KEYS["accepted"]}},
    # IPv6 single-stack clusters: --listen [::]:PORT; an unbracketed address is bracketed.
    "node, listenAddress [::]": {"listenAddress": "[::]"},
    "sidecar, dcgm-exporter source, listenAddress ::": {"mode": "sidecar", "source": "dcgm-exporter", "listenAddress": "::"},
    # Settings the flags do not reach: OTLP through the environment. A web config (TLS and
    # basic auth) from a Secret: mounted, named with --web-config, the probes by TCP (basic
    # auth covers /healthz and /readyz, and the kubelet sends no credentials), and the
    # monitor scraping with https, the CA and the credentials.
    "node, extra environment, a web config from a Secret": {
        "extraEnv": [{"name": "TRUTHSCALE_OTLP__ENDPOINT", "value": "http://otel-collector:4318"}],
        "webConfig": {
            "secretName": "truthscale-web", "scheme": "https",
            "tlsConfig": {"ca": {"secret": {"name": "truthscale-ca", "key": "ca.crt"}}, "serverName": "truthscale"},
            "basicAuth": {"username": {"name": "scrape", "key": "username"}, "password": {"name": "scrape", "key": "password"}},
        },
    },
    # A private registry, a pinned image, a priority class, and a kubelet with another
    # --root-dir (microk8s).
    "node, image by digest, pull secrets, priority class, another kubelet directory": {
        "image": {"digest": "sha256:" + "ab" * 32},
        "imagePullSecrets": [{"name": "registry"}],
        "node": {"priorityClassName": "system-node-critical",
                 "podResourcesHostPath": "/var/snap/microk8s/common/var/lib/kubelet/pod-resources"},
    },
    "sidecar, pull secrets": {"mode": "sidecar", "source": "sim", "imagePullSecrets": [{"name": "registry"}]},
    "sidecar, ServiceMonitor, a web config and a mounted config": {
        "mode": "sidecar", "source": "sim", "monitor": {"kind": "ServiceMonitor"},
        "webConfig": {"secretName": "truthscale-web", "scheme": "https"},
        "extraVolumes": [{"name": "cfg", "configMap": {"name": "truthscale-config"}}],
        "extraVolumeMounts": [{"name": "cfg", "mountPath": "/etc/truthscale-config", "readOnly": True}],
        "extraArgs": ["--config", "/etc/truthscale-config/config.toml"],
    },
    "sidecar, extra environment and a mounted config": {
        "mode": "sidecar", "source": "sim",
        "extraEnv": [{"name": "TRUTHSCALE_MAX_SERIES", "value": "1000"}],
        "extraVolumes": [{"name": "cfg", "configMap": {"name": "truthscale-config"}}],
        "extraVolumeMounts": [{"name": "cfg", "mountPath": "/etc/truthscale", "readOnly": True}],
        "extraArgs": ["--config", "/etc/truthscale/config.toml"],
    },
    "sidecar, dcgm-exporter through its Service": {
        "mode": "sidecar", "source": "dcgm-exporter", "sidecar": {"gpuUuids": GPU_UUID},
        "dcgmExporterUrl": "http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics",
    },
    "node, dcgm-exporter source, an IPv6 node IP": {"source": "dcgm-exporter", "listenAddress": "::", "nodeIPv6": True},
}

# How a good case is installed, where not with release `truthscale` against a stand-in API
# server that serves the Prometheus Operator's CRDs.
CASE_OPTIONS = {
    "sidecar, sim source, numeric names": {"release": "123"},
    "node, cluster without the Prometheus Operator's CRDs": {"crds": False},
    "sidecar, ServiceMonitor, cluster without the Prometheus Operator's CRDs": {"crds": False},
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
    # The agent refuses source.per_process_series with any source but NVML (exit status 2).
    "node.perProcess with source dcgm-exporter": {"source": "dcgm-exporter", "node": {"perProcess": True}},
    "node.perProcess with source sim": {"source": "sim", "node": {"perProcess": True}},
    # The device plugin gives the GPU to the inference container only: the sidecar would stop
    # at start, unable to load NVML.
    "sidecar, source nvml, no sidecar.visibleDevices": {"mode": "sidecar"},
    "sidecar.visibleDevices: all": {"mode": "sidecar", "sidecar": {"visibleDevices": "all"}},
    # dcgm-exporter labels a MIG instance with its parent's UUID; NVML reads visibleDevices.
    "sidecar.gpuUuids: a MIG UUID": {"mode": "sidecar", "source": "dcgm-exporter", "sidecar": {"gpuUuids": "MIG-1"}},
    "sidecar.gpuUuids with source nvml": {"mode": "sidecar", "sidecar": {"visibleDevices": GPU_UUID, "gpuUuids": GPU_UUID}},
    "monitor.labels with the chart's app.kubernetes.io/name": {"monitor": {"labels": {"app.kubernetes.io/name": "x"}}},
    "dashboards.labels with the chart's helm.sh/chart": {"dashboards": {"labels": {"helm.sh/chart": "x"}}},
    # --listen takes an address, not a name, and the chart adds the port.
    "listenAddress: localhost": {"listenAddress": "localhost"},
    "listenAddress with a port": {"listenAddress": "0.0.0.0:9488"},
    "listenAddress [::] with a port": {"listenAddress": "[::]:9488"},
    "listenAddress: [:: unclosed": {"listenAddress": "[::"},
    "nodeIPv6: a string": {"nodeIPv6": "yes"},
    "extraEnv without a name": {"extraEnv": [{"value": "x"}]},
    "extraVolumeMounts without a mountPath": {"extraVolumeMounts": [{"name": "x"}]},
    "webConfig.scheme: ftp": {"webConfig": {"secretName": "web", "scheme": "ftp"}},
    "image.digest without sha256": {"image": {"digest": "abcdef"}},
    "imagePullSecrets entry without a name": {"imagePullSecrets": [{"secret": "registry"}]},
    "node.podResourcesHostPath relative": {"node": {"podResourcesHostPath": "var/lib/kubelet/pod-resources"}},
    "webConfig.secretName not a name": {"webConfig": {"secretName": "Web Config"}},
    "unknown key under webConfig": {"webConfig": {"file": "/etc/web.yml"}},
    # serve refuses a dcgm-exporter URL that is not http(s).
    "dcgmExporterUrl without a scheme": {"source": "dcgm-exporter", "dcgmExporterUrl": "dcgm:9400/metrics"},
    "dcgmExporterUrl with a space": {"source": "dcgm-exporter", "dcgmExporterUrl": "http://a b/metrics"},
    # The agent stops at start on a key that is not a Kubernetes label key.
    **{f"node.podLabels key {short(k)}": {"node": {"podLabels": [k]}} for k in LABEL_KEYS["refused"]},
}

# The message of a template's `fail` that must refuse the case.
BAD_MESSAGES = {
    "node.perProcess with source dcgm-exporter": "node.perProcess needs source nvml",
    "node.perProcess with source sim": "node.perProcess needs source nvml",
    "sidecar, source nvml, no sidecar.visibleDevices": "needs sidecar.visibleDevices",
    "sidecar.gpuUuids with source nvml": "for source dcgm-exporter only",
}


def merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def lint(chart: Path) -> list[str]:
    """Helm's lint of the chart: its findings of severity warning or error (empty: it passes)."""
    try:
        result = asyncio.run(helm_sdkpy.Lint(helm_sdkpy.Configuration(namespace="default")).run(str(chart)))
    except helm_sdkpy.exceptions.HelmError as e:
        return [f"lint error: {e}"]
    findings = [f"{SEVERITY.get(m['Severity'], m['Severity'])} {m['Path']}: {m.get('Err')}"
                for m in result.get("Messages") or [] if m["Severity"] >= 2]
    return findings + [f"error: {e}" for e in result.get("Errors") or []]


def with_values(tmp: str, values: dict) -> Path:
    """A copy of the chart whose values.yaml is `values`."""
    chart = Path(tmp) / "truthscale"
    shutil.copytree(CHART, chart)
    (chart / "values.yaml").write_text(json.dumps(values))
    return chart


class FakeApiServer:
    """Just enough of a Kubernetes API server on 127.0.0.1 for Helm's install to run offline:
    discovery for the kinds the chart renders, an empty release history, and every create
    accepted and kept (`created`). Nothing is stored or served back; no cluster is involved."""

    CORE = [("secrets", "Secret"), ("configmaps", "ConfigMap"), ("serviceaccounts", "ServiceAccount"),
            ("services", "Service")]
    GROUPS = {
        "apps/v1": [("deployments", "Deployment"), ("daemonsets", "DaemonSet")],
        "rbac.authorization.k8s.io/v1": [("clusterroles", "ClusterRole"), ("clusterrolebindings", "ClusterRoleBinding")],
        "monitoring.coreos.com/v1": [("podmonitors", "PodMonitor"), ("servicemonitors", "ServiceMonitor"),
                                     ("prometheusrules", "PrometheusRule")],
    }
    CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}

    def __init__(self, crds: bool = True):
        """crds: whether discovery serves the Prometheus Operator's monitoring.coreos.com/v1."""
        self.created: list[dict] = []
        self.groups = {gv: kinds for gv, kinds in self.GROUPS.items() if crds or not gv.startswith("monitoring.")}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, code: int, obj: dict):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                code, obj = server.get(self.path.split("?")[0])
                self.reply(code, obj)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if "json" in (self.headers.get("Content-Type") or ""):
                    server.created.append(json.loads(raw))  # a chart object
                    return self.reply(201, json.loads(raw))
                self.reply(201, server.release_secret())  # Helm's release record (protobuf)

            def do_PUT(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.reply(200, server.release_secret())

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @staticmethod
    def release_secret() -> dict:
        return {"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "release", "namespace": "default"}}

    def resources(self, group_version: str, kinds: list[tuple[str, str]]) -> dict:
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": [
            {"name": plural, "singularName": kind.lower(), "kind": kind, "namespaced": kind not in self.CLUSTER_SCOPED,
             "verbs": ["create", "delete", "get", "list", "patch", "update"]} for plural, kind in kinds]}

    def get(self, path: str) -> tuple[int, dict]:
        if path == "/version":
            return 200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0"}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": gv.split("/")[0], "versions": [{"groupVersion": gv, "version": "v1"}],
                 "preferredVersion": {"groupVersion": gv, "version": "v1"}} for gv in self.groups]}
        if path == "/api/v1":
            return 200, self.resources("v1", self.CORE)
        if path.startswith("/apis/") and path[6:] in self.groups:
            return 200, self.resources(path[6:], self.groups[path[6:]])
        if path.endswith("/secrets"):  # Helm's release history: none
            return 200, {"kind": "SecretList", "apiVersion": "v1", "metadata": {}, "items": []}
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}

    def kubeconfig(self) -> str:
        """Kubeconfig YAML text (helm-sdkpy takes a kubeconfig's text or its path)."""
        return yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "check",
            "clusters": [{"name": "check", "cluster": {"server": f"http://127.0.0.1:{self.httpd.server_port}"}}],
            "contexts": [{"name": "check", "context": {"cluster": "check", "namespace": "monitoring"}}],
            "users": [{"name": "check", "user": {}}],
        })


def render(chart: Path, release: str = "truthscale", crds: bool = True) -> tuple[list[dict], str, str]:
    """The chart's objects, as Helm's install (namespace monitoring) sends them to
    FakeApiServer, the release's manifest (the YAML text Helm rendered) and its notes."""
    with FakeApiServer(crds) as api:
        config = helm_sdkpy.Configuration(namespace="monitoring", kubeconfig=api.kubeconfig())
        result = asyncio.run(helm_sdkpy.Install(config).run(release, str(chart), wait=False, timeout=60))
        notes = (result.get("info") or {}).get("notes", "")
        return list(api.created), result.get("manifest", ""), notes


def check_notes(v: dict, notes: str) -> list[str]:
    """What the notes must say: that every GPU is simulated with source sim, and nothing of
    it otherwise; that a dcgm-exporter sidecar without sidecar.gpuUuids relies on
    dcgm-exporter's pod mapping."""
    errs = []
    sim = "WARNING: source=sim. Every GPU is simulated" in notes
    if sim != (v["source"] == "sim"):
        errs.append(f"source {v['source']}: the notes {'say' if sim else 'do not say'} every GPU is simulated")
    mapping = "needs dcgm-exporter's\npod mapping" in notes
    want = v["mode"] == "sidecar" and v["source"] == "dcgm-exporter" and not v["sidecar"].get("gpuUuids")
    if mapping != want:
        errs.append(f"the notes {'name' if mapping else 'do not name'} dcgm-exporter's pod mapping")
    return errs


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that holds a key twice."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found the key {key!r} twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def check_manifest(manifest: str, objs: list[dict]) -> list[str]:
    """The rendered YAML holds no mapping key twice, and is the objects Helm sent."""
    try:
        docs = [d for d in yaml.load_all(manifest, Loader=UniqueKeyLoader) if d]
    except yaml.YAMLError as e:
        return [f"the rendered manifest: {e}"]
    if len(docs) != len(objs):
        return [f"the rendered manifest holds {len(docs)} objects, Helm sent {len(objs)}"]
    return []


RULE_FILES = {"truthscale": "truthscale", "showback": "showback", "dcgmExporter": "dcgm-exporter",
              "causes": "causes", "autoscaling": "autoscaling"}


def by_kind(objs: list[dict]) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for o in objs:
        kinds.setdefault(o["kind"], []).append(o)
    return kinds


def check_workload(v: dict, kinds: dict[str, list[dict]]) -> list[str]:
    """The DaemonSet (node) or Deployment (sidecar): args, port, resources, and what node mode
    adds only when its values ask (hostPID, capabilities, the cgroup mount, a token)."""
    node = v["mode"] == "node"
    want, other = ("DaemonSet", "Deployment") if node else ("Deployment", "DaemonSet")
    if len(kinds.get(want, [])) != 1 or kinds.get(other):
        return [f"mode {v['mode']}: {len(kinds.get(want, []))} {want}, {len(kinds.get(other, []))} {other}"]
    pod = kinds[want][0]["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] if c["name"] == "truthscale"]
    errs = []
    if (c["args"][:3] == ["serve", "--mode", "node"]) != node or c["args"][0] != "serve":
        errs.append(f"args {c['args']}: serve, with --mode node in node mode only")
    if not any(a == v["source"] or a.startswith(f"{v['source']}:") for a in c["args"]):
        errs.append(f"args {c['args']} do not name the source {v['source']}")
    if v["source"] == "dcgm-exporter":
        # The URL given, else the node-local dcgm-exporter: an IPv6 node IP in brackets,
        # else no URL.
        ip = "[$(NODE_IP)]" if v.get("nodeIPv6") else "$(NODE_IP)"
        url = f"dcgm-exporter:http://{ip}:{v['dcgmExporterPort']}/metrics"
        if v.get("dcgmExporterUrl"):
            url = f"dcgm-exporter:{v['dcgmExporterUrl']}"
        if url not in c["args"]:
            errs.append(f"args {c['args']}: want the source {url}")
    if [p["containerPort"] for p in c["ports"]] != [v["port"]]:
        errs.append(f"container ports {c['ports']}, want {v['port']}")
    host = v.get("listenAddress") or "0.0.0.0"
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    listen = [c["args"][i + 1] for i, a in enumerate(c["args"][:-1]) if a == "--listen"]
    if listen != [f"{host}:{v['port']}"]:
        errs.append(f"--listen {listen}, want {host}:{v['port']} (listenAddress {v.get('listenAddress')!r})")
    # A pod is Ready only when every container is: the sidecar's /readyz (503 before the first
    # sample and while a read hangs) would take the inference pod out of its Service. Liveness
    # for both; readiness for the node agent, a pod of its own, only.
    # With a web config, basic auth covers /healthz and /readyz and the kubelet sends no
    # credentials: the probes check the port by TCP.
    web = v["webConfig"]["secretName"]

    def probed(p: str):
        got = c.get(p, {})
        return "tcp" if got.get("tcpSocket", {}).get("port") == "metrics" else got.get("httpGet", {}).get("path")

    probe = {p: probed(p) for p in ("livenessProbe", "readinessProbe")}
    want_probe = {"livenessProbe": "tcp" if web else "/healthz",
                  "readinessProbe": ("tcp" if web else "/readyz") if node else None}
    if probe != want_probe or (not node and "readinessProbe" in c):
        errs.append(f"probes {probe}, want {want_probe}")
    web_args = [c["args"][i + 1] for i, a in enumerate(c["args"][:-1]) if a == "--web-config"]
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    volumes = {x["name"]: x for x in pod.get("volumes", [])}
    if web:
        mount, volume = mounts.get("truthscale-web-config", {}), volumes.get("truthscale-web-config", {})
        if web_args != ["/etc/truthscale/web.yml"] or mount.get("mountPath") != "/etc/truthscale" \
                or mount.get("readOnly") is not True or volume.get("secret", {}).get("secretName") != web:
            errs.append(f"web config {web}: --web-config {web_args}, mount {mount}, volume {volume}")
    elif web_args or "truthscale-web-config" in mounts or "truthscale-web-config" in volumes:
        errs.append("a web config's flag, mount and volume belong with webConfig.secretName only")
    image = v["image"]
    want_image = f"{image['repository']}@{image['digest']}" if image.get("digest") else \
        f"{image['repository']}:{image.get('tag') or CHART_VERSION}"
    if c["image"] != want_image:
        errs.append(f"image {c['image']}, want {want_image}")
    if pod.get("imagePullSecrets", []) != v["imagePullSecrets"]:
        errs.append(f"imagePullSecrets {pod.get('imagePullSecrets')}, want {v['imagePullSecrets']}")
    if node and pod.get("priorityClassName") != (v["node"]["priorityClassName"] or None):
        errs.append(f"priorityClassName {pod.get('priorityClassName')}, want {v['node']['priorityClassName']!r}")
    if c["resources"] != v["node" if node else "sidecar"]["resources"]:
        errs.append(f"resources {c['resources']} are not the values'")
    sc = c["securityContext"]
    if sc.get("readOnlyRootFilesystem") is not True or sc.get("capabilities", {}).get("drop") != ["ALL"]:
        errs.append(f"securityContext {sc}: read-only root and no capabilities kept")
    workload = kinds[want][0]
    template_labels = workload["spec"]["template"]["metadata"]["labels"]
    if any(template_labels.get(k) != x for k, x in workload["spec"]["selector"]["matchLabels"].items()):
        errs.append(f"the {want} selects {workload['spec']['selector']}, its pods are labelled {template_labels}")
    if not node and workload["metadata"]["labels"].get("app.kubernetes.io/name") != v["sidecar"]["workload"]["name"]:
        errs.append(f"the Deployment's labels {workload['metadata']['labels']} do not name the workload")
    # GPU access from the NVIDIA container runtime, for the NVML source only: every GPU for
    # the node agent, the inference container's for the sidecar (the device plugin gives it to
    # that container alone).
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    nvml = v["source"] == "nvml"
    part = v["node" if node else "sidecar"]
    want_env = {"NVIDIA_VISIBLE_DEVICES": "all" if node else part.get("visibleDevices"),
                "NVIDIA_DRIVER_CAPABILITIES": "utility"} if nvml else {}
    got_env = {k: x for k, x in env.items() if k.startswith("NVIDIA_")}
    if got_env != want_env:
        errs.append(f"source {v['source']}: NVIDIA_* variables {got_env}, want {want_env}")
    want_class = (part.get("runtimeClassName") or None) if nvml else None
    if pod.get("runtimeClassName") != want_class:
        errs.append(f"source {v['source']}: runtimeClassName {pod.get('runtimeClassName')}, want {want_class}")
    # The pod's GPUs among a dcgm-exporter's, where named: the dcgm-exporter sidecar only.
    want_uuids = None if node or v["source"] != "dcgm-exporter" else (v["sidecar"].get("gpuUuids") or None)
    if env.get("TRUTHSCALE_SOURCE__GPU_UUIDS") != want_uuids:
        errs.append(f"TRUTHSCALE_SOURCE__GPU_UUIDS {env.get('TRUTHSCALE_SOURCE__GPU_UUIDS')!r}, want {want_uuids!r}")
    if not node:
        return errs
    if ("TRUTHSCALE_SOURCE__PER_PROCESS_SERIES" in env) != v["node"]["perProcess"]:
        errs.append("the per-process variable belongs with node.perProcess only")
    per_process, labels = v["node"]["perProcess"], bool(v["node"]["podLabels"])
    host_paths = {x["hostPath"]["path"] for x in pod.get("volumes", []) if "hostPath" in x}
    want_paths = {v["node"]["podResourcesHostPath"]} | ({"/sys/fs/cgroup"} if per_process else set())
    # Mounted where the agent reads the kubelet's socket, whatever the node's path.
    if not any(m["name"] == "pod-resources" and m["mountPath"] == "/var/lib/kubelet/pod-resources"
               for m in c.get("volumeMounts", [])):
        errs.append(f"the pod-resources folder is not mounted at /var/lib/kubelet/pod-resources: {c.get('volumeMounts')}")
    if host_paths != want_paths:
        errs.append(f"hostPath volumes {sorted(host_paths)}, want {sorted(want_paths)}")
    if any(m.get("readOnly") is not True for m in c.get("volumeMounts", [])):
        errs.append(f"a hostPath mount is not read-only: {c.get('volumeMounts')}")
    added = sc.get("capabilities", {}).get("add", [])
    if bool(pod.get("hostPID")) != per_process or bool(added) != per_process:
        errs.append(f"hostPID {pod.get('hostPID')}, capabilities added {added}: only with node.perProcess")
    if ("TRUTHSCALE_NODE__POD_LABELS" in env) != labels or pod.get("automountServiceAccountToken") is not labels:
        errs.append("the pod-labels variable and a token belong with node.podLabels only")
    if {"POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME"} & set(env):
        errs.append("the node agent's own identity must not label GPUs")
    return errs


def check_rbac(v: dict, kinds: dict[str, list[dict]]) -> list[str]:
    """RBAC only for node mode's pod labels: exactly list on pods, bound to the agent's
    ServiceAccount."""
    rbac = [k for k in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding") for _ in kinds.get(k, [])]
    if v["mode"] != "node" or not v["node"]["podLabels"]:
        return [f"RBAC {rbac} without node.podLabels"] if rbac else []
    if rbac != ["ClusterRole", "ClusterRoleBinding"]:
        return [f"RBAC {rbac}, want one ClusterRole and one ClusterRoleBinding"]
    (role,), (binding,), (sa,) = kinds["ClusterRole"], kinds["ClusterRoleBinding"], kinds["ServiceAccount"]
    errs = []
    if role["rules"] != [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]:
        errs.append(f"ClusterRole rules {role['rules']}")
    if binding["roleRef"]["name"] != role["metadata"]["name"]:
        errs.append(f"the binding refers to {binding['roleRef']}")
    if binding["subjects"] != [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "monitoring"}]:
        errs.append(f"the binding's subjects {binding['subjects']}")
    return errs


def check_monitor(v: dict, kinds: dict[str, list[dict]], crds: bool = True) -> list[str]:
    """The PodMonitor or ServiceMonitor selects the exporter's pods (through the Service),
    honours labels as asked, carries the extra labels, and in node mode drops the agent's.
    None (nor the ServiceMonitor's Service) where the cluster lacks the CRDs."""
    m, kind = v["monitor"], v["monitor"]["kind"]
    present = [k for k in ("PodMonitor", "ServiceMonitor", "Service") for _ in kinds.get(k, [])]
    want = {"PodMonitor": ["PodMonitor"], "ServiceMonitor": ["ServiceMonitor", "Service"], "none": []}[kind]
    if not crds:
        want = []
    if present != want:
        return [f"monitor.kind {kind}{'' if crds else ', no CRDs'}: rendered {present}"]
    if not want:
        return []
    (workload,) = kinds.get("DaemonSet", []) + kinds.get("Deployment", [])
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    mon = kinds[kind][0]
    errs = []
    targets = pod_labels
    if kind == "ServiceMonitor":
        (svc,) = kinds["Service"]
        if any(pod_labels.get(k) != x for k, x in svc["spec"]["selector"].items()):
            errs.append(f"the Service selects {svc['spec']['selector']}, the pods are {pod_labels}")
        targets = svc["metadata"]["labels"]
    if any(targets.get(k) != x for k, x in mon["spec"]["selector"]["matchLabels"].items()):
        errs.append(f"the {kind} selects {mon['spec']['selector']}, not {targets}")
    if any(mon["metadata"]["labels"].get(k) != x for k, x in m["labels"].items()):
        errs.append(f"the {kind} lacks the labels {m['labels']}")
    if "truthscale" not in mon["metadata"]["name"]:
        errs.append("the job label must contain truthscale")
    (ep,) = mon["spec"]["podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"]
    drops = [r.get("regex") for r in ep.get("relabelings", []) if r.get("action") == "labeldrop"]
    if ep["honorLabels"] is not m["honorLabels"] or ep["port"] != "metrics":
        errs.append(f"endpoint {ep}")
    if drops != (["pod|namespace|container"] if v["mode"] == "node" else []):
        errs.append(f"labeldrop {drops} in mode {v['mode']}")
    # A web config: the scrape's scheme, TLS settings and credentials, as given.
    web = v["webConfig"]
    want_auth = {"scheme": web["scheme"], "tlsConfig": web["tlsConfig"] or None,
                 "basicAuth": web["basicAuth"] or None} if web["secretName"] else \
        {"scheme": None, "tlsConfig": None, "basicAuth": None}
    got_auth = {k: ep.get(k) for k in want_auth}
    if got_auth != want_auth:
        errs.append(f"the {kind}'s scrape {got_auth}, want {want_auth}")
    return errs


def check_rules_and_dashboards(v: dict, kinds: dict[str, list[dict]], crds: bool = True) -> list[str]:
    """Each enabled rule set's PrometheusRule has alerts/<name>.rules.yml as its spec (none
    where the cluster lacks the CRDs); the ConfigMap labelled grafana_dashboard holds every
    dashboards/*.json, the same text."""
    errs = []
    sets = v["prometheusRule"]["ruleSets"] if v["prometheusRule"]["enabled"] and crds else {}
    want = sorted(RULE_FILES[k] for k, on in sets.items() if on and (k != "showback" or v["mode"] == "node"))
    got = {r["metadata"]["labels"]["app.kubernetes.io/component"].removesuffix("-rules"): r
           for r in kinds.get("PrometheusRule", [])}
    if sorted(got) != want:
        errs.append(f"PrometheusRules {sorted(got)}, want {want}")
    for name, rule in got.items():
        if rule["spec"] != yaml.safe_load((ROOT / "alerts" / f"{name}.rules.yml").read_text()):
            errs.append(f"PrometheusRule {name}: its spec is not alerts/{name}.rules.yml")
    maps = kinds.get("ConfigMap", [])
    if not v["dashboards"]["enabled"]:
        return errs + ([f"{len(maps)} ConfigMaps with dashboards off"] if maps else [])
    dashboards = {p.name: p.read_text() for p in sorted((ROOT / "dashboards").glob("*.json"))}
    grafana = v["dashboards"]["labels"].get("grafana_dashboard", "1")
    if len(maps) != 1 or maps[0]["metadata"]["labels"].get("grafana_dashboard") != grafana:
        errs.append(f"no single ConfigMap labelled grafana_dashboard: {grafana!r}")
    elif maps[0]["data"] != dashboards:
        errs.append(f"the ConfigMap holds {sorted(maps[0]['data'])}, not dashboards/*.json as they are")
    return errs


def kubernetes_validate(objs: list[dict], k8s_version: str, folder: Path) -> list[str]:
    """kubernetes-validate --strict on the built-in kinds (the CRD kinds have no schema there)."""
    core = [o for o in objs if o["kind"] not in ("PodMonitor", "ServiceMonitor", "PrometheusRule")]
    path = folder / "rendered.core.yaml"
    path.write_text(yaml.safe_dump_all(core))
    run = subprocess.run(["kubernetes-validate", "--strict", "--quiet", "-k", k8s_version, str(path)],
                         capture_output=True, text=True)
    return [] if run.returncode == 0 else [f"kubernetes-validate: {(run.stdout + run.stderr).strip()[:600]}"]


def good_case(name: str, values: dict, k8s_version: str, release: str = "truthscale", crds: bool = True) -> bool:
    """Lint must pass; the rendered objects must pass every check."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = with_values(tmp, values)
        problems = lint(chart)
        if not problems:
            try:
                objs, manifest, notes = render(chart, release, crds)
            except helm_sdkpy.exceptions.HelmError as e:
                objs, manifest, problems = [], "", [f"render (install against the stand-in API server): {e}"]
            kinds = by_kind(objs)
            if objs:
                problems += check_manifest(manifest, objs)
                problems += check_notes(values, notes)
            for check in (check_workload, check_rbac):
                problems += check(values, kinds)
            for check in (check_monitor, check_rules_and_dashboards):
                problems += check(values, kinds, crds)
            problems += kubernetes_validate(objs, k8s_version, Path(tmp))
    summary = "" if problems else (
        f"; renders {', '.join(f'{len(v)} {k}' for k, v in sorted(kinds.items()))}; "
        f"checks and kubernetes-validate pass")
    print(f"{'pass' if not problems else 'FAIL'}: {name}: lint {'passes' if not problems else 'or a check of its objects fails'}{summary}")
    for p in problems:
        print(f"    {p[:600]}")
    return not problems


def bad_case(name: str, values: dict) -> bool:
    """Lint must fail, or else the install (a template's `fail`, which lint only logs), with
    the message BAD_MESSAGES names where it names one."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = with_values(tmp, values)
        findings, how = lint(chart), "lint fails"
        if not findings:
            how = "lint passes, the install fails"
            try:
                render(chart)
            except helm_sdkpy.exceptions.HelmError as e:
                findings = [f"install: {e}"]
    want = BAD_MESSAGES.get(name)
    refused = bool(findings) and (want is None or want in findings[0])
    if not findings:
        how = "lint and install PASS"
    elif not refused:
        how += f", but not with {want!r}"
    print(f"{'pass' if refused else 'FAIL'}: {name}: {how}{', as it must' if refused else ''}"
          + (f" ({findings[0][:240]})" if findings else ""))
    return refused


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k8s-version", required=True, help="the Kubernetes version for kubernetes-validate")
    args = parser.parse_args()
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    wrong = [n for n, v in GOOD.items()
             if not good_case(n, merge(defaults, v), args.k8s_version, **CASE_OPTIONS.get(n, {}))]
    wrong += [n for n, v in BAD.items() if not bad_case(n, merge(defaults, v))]
    if wrong:
        print(f"chart-lint: {len(wrong)} case(s) wrong: {wrong}", file=sys.stderr)
        return 1
    print(f"chart-lint: {len(GOOD)} good values pass lint and render valid objects; {len(BAD)} hostile values "
          f"are refused ({len(BAD) - len(BAD_MESSAGES)} by lint, {len(BAD_MESSAGES)} by the templates at install)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
