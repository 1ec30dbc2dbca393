#!/usr/bin/env bash
# OTLP outage measurement: run `truthscale serve` pushing OTLP/HTTP to a closed port for
# OUTAGE_SECONDS (default 600), then bring a receiver up on that port. Reports the RSS
# growth over the outage, the failures counted on /metrics, and the time from the
# receiver coming up to the first successful export.
#
#   scripts/otlp-outage.sh          # the full 10-minute outage
#   scripts/otlp-outage.sh 120      # a shorter one
#
# Needs python3 (the receiver answers 200 to any POST, like a collector accepting it).
set -euo pipefail
outage=${1:-600}
cd "$(dirname "$0")/.."
cargo build --quiet -p truthscale-exporter --bin truthscale
bin=${CARGO_TARGET_DIR:-target}/debug/truthscale
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
otlp_port=$(free_port)
http_port=$(free_port)
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
metric() { # sum of the samples of a family on /metrics
  python3 - "$http_port" "$1" <<'PY'
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
print(sum(float(l.rsplit(" ", 1)[1]) for l in body.splitlines() if l.startswith(sys.argv[2])))
PY
}

OTEL_METRIC_EXPORT_INTERVAL=1000 RUST_LOG=info "$bin" serve --source sim:tiny-kernel \
  --sim-gpus 1 --interval 500ms --listen "127.0.0.1:$http_port" \
  --otlp-endpoint "http://127.0.0.1:$otlp_port" 2>"$work/serve.log" &
serve=$!
pids+=("$serve")
sleep 5
rss_start=$(rss "$serve")
rss_max=$rss_start
echo "outage: ${outage}s against closed port $otlp_port; RSS at start ${rss_start} KiB"
end=$((SECONDS + outage))
while ((SECONDS < end)); do
  sleep 5
  r=$(rss "$serve")
  ((r > rss_max)) && rss_max=$r
done
rss_end=$(rss "$serve")
errors=$(metric 'truthscale_sink_errors_total{sink="otlp"')
echo "after the outage: RSS ${rss_end} KiB (max ${rss_max} KiB, growth $((rss_end - rss_start)) KiB); truthscale_sink_errors_total{sink=\"otlp\"} = $errors"

cat >"$work/recv.py" <<'PY'
import sys, time, http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("content-length", 0)); self.rfile.read(n)
        self.send_response(200); self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0"); self.end_headers()
        with open(sys.argv[2], "a") as f: f.write(f"{time.time()} {self.path} {n}\n")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
up=$(date +%s.%N)
python3 "$work/recv.py" "$otlp_port" "$work/received" &
pids+=("$!")
deadline=$((SECONDS + 120))
until [[ -s "$work/received" ]]; do
  ((SECONDS < deadline)) || { echo "no export within 120s of the receiver coming up"; tail "$work/serve.log"; exit 1; }
  sleep 0.1
done
first=$(head -1 "$work/received" | cut -d' ' -f1)
echo "receiver up: first export after $(python3 -c "print(round($first - $up, 2))")s ($(head -1 "$work/received" | cut -d' ' -f2-3) bytes)"
sleep 3
echo "RSS after recovery: $(rss "$serve") KiB; log lines about OTLP: $(grep -c OTLP "$work/serve.log")"
grep OTLP "$work/serve.log" | sed 's/^/  /' | tail -5
