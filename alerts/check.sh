#!/usr/bin/env bash
# Validates the Prometheus rules and runs their unit tests with promtool.
# Usage: alerts/check.sh   (from anywhere; it works from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool not found: apt-get install prometheus" >&2
  exit 1
fi

shopt -s nullglob
rules=(alerts/*.yml)
tests=(alerts/tests/*.yml)
if ((${#rules[@]} == 0)) || ((${#tests[@]} == 0)); then
  echo "no rule files (alerts/*.yml) or tests (alerts/tests/*.yml) found" >&2
  exit 1
fi

promtool check rules "${rules[@]}"
promtool test rules "${tests[@]}"
