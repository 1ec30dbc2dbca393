#!/usr/bin/env bash
# Builds a container image of truthscale offline and runs it: no registry is reached.
#
# The image is the packaging of docker/Dockerfile's runtime stage, built from scratch: the
# truthscale binary that this tree built, the glibc libraries it links (what distroless cc
# provides), the same entrypoint, command, user (65532:65532) and port (9488). buildah builds
# it (vfs storage, no daemon) and runs it with chroot isolation: `--version`, then `serve` on
# a loopback port until /metrics answers with the simulated GPUs. The Dockerfile's builder and
# distroless stages need registry pulls; docker/check.sh validates them statically.
#
# Usage: docker/image-check.sh [BINARY]   (default target/debug/truthscale, built if missing)
# Installs buildah and crun with apt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/debug/truthscale}

missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v crun >/dev/null || command -v runc >/dev/null || missing+=(crun)
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing image-check prerequisites: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -x "$BIN" ] || cargo build -q -p truthscale-exporter

b() { buildah --storage-driver vfs "$@"; }
tag="localhost/truthscale-check:$(date +%s)"
ctr=""; run_ctr=""; server=""
cleanup() {
  # The server runs in its own process group (setsid): stop the whole group, buildah and
  # the process it runs in the container.
  if [ -n "$server" ]; then
    kill -TERM -- "-$server" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 -- "-$server" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  for c in "$ctr" "$run_ctr"; do [ -n "$c" ] && b rm "$c" >/dev/null 2>&1 || true; done
  b rmi "$tag" >/dev/null 2>&1 || true
}
trap cleanup EXIT

ctr=$(b from scratch)
mnt=$(b mount "$ctr")
install -D -m 0755 "$BIN" "$mnt/usr/local/bin/truthscale"
for lib in $(ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}'); do
  install -D -m 0755 "$(readlink -f "$lib")" "$mnt$lib"
done
b umount "$ctr" >/dev/null
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
b config --entrypoint '["/usr/local/bin/truthscale"]' --cmd '["serve"]' \
  --user 65532:65532 --port 9488 \
  --label org.opencontainers.image.title=truthscale \
  --label "org.opencontainers.image.version=$version" "$ctr"
b commit -q "$ctr" "$tag" >/dev/null
echo "built $tag from $BIN ($(du -h "$BIN" | cut -f1) binary, $(ldd "$BIN" | grep -c '=> /') libraries)"

# The configuration says what the Dockerfile says.
config=$(b inspect --type image "$tag" | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["OCIv1"]["config"], separators=(",", ":")))')
for want in '"User":"65532:65532"' '"Entrypoint":["/usr/local/bin/truthscale"]' \
            '"Cmd":["serve"]' '"ExposedPorts":{"9488"'; do
  case "$config" in
    *"$want"*) ;;
    *) echo "image config lacks $want: $config" >&2; exit 1 ;;
  esac
done

run_ctr=$(b from "$tag")
got=$(b run --isolation chroot "$run_ctr" -- /usr/local/bin/truthscale --version)
[ "$got" = "truthscale $version" ] || { echo "--version in the image says '$got'" >&2; exit 1; }
echo "ran: $got"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
setsid buildah --storage-driver vfs run --isolation chroot --user 65532:65532 "$run_ctr" -- /usr/local/bin/truthscale serve \
  --source sim --sim-gpus 2 --interval 200ms --listen "127.0.0.1:$port" >"$log" 2>&1 &
server=$!
for _ in $(seq 150); do
  if body=$(curl -fs "127.0.0.1:$port/metrics" 2>/dev/null) && [[ "$body" == *'source="sim"'* ]]; then
    gpus=$(grep -c '^truthscale_gpu_info{' <<<"$body" || true)
    echo "served /metrics from the image as user 65532: $gpus simulated GPUs"
    [ "$gpus" = 2 ] || { echo "expected 2 GPUs" >&2; exit 1; }
    echo "image check passed"
    rm -f "$log"
    exit 0
  fi
  if ! kill -0 "$server" 2>/dev/null; then
    echo "the container exited:" >&2; cat "$log" >&2; exit 1
  fi
  sleep 0.2
done
echo "no /metrics from the container in 30 s:" >&2; cat "$log" >&2
exit 1
