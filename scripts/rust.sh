# Sourced by scripts/serve-sim and scripts/test: makes sure a Rust toolchain of the
# workspace's `rust-version` (Cargo.toml) or later is on PATH. Where cargo is missing, as on a
# fresh Debian machine, it installs gcc (the linker), curl and the CA certificates with apt,
# then rustup's minimal stable toolchain into ~/.cargo; where cargo is older and rustup
# manages it, it updates stable. Anything else stops with what to do.

# The workspace's minimum Rust, as Cargo.toml states it (e.g. 1.95).
rust_version_wanted() {
  sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1
}

# Whether version $1 (x.y[.z]) is at least $2.
version_at_least() {
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

# apt-get install of the Debian packages named, with sudo where not root.
apt_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: $*"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_rust() {
  local wanted have
  wanted=$(rust_version_wanted)
  [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
  if ! command -v cargo >/dev/null; then
    local need=()
    command -v cc >/dev/null || need+=(gcc libc6-dev)
    command -v curl >/dev/null || need+=(curl)
    [ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
    if ((${#need[@]})); then apt_install "${need[@]}"; fi
    echo "installing Rust (rustup, stable, minimal profile) into ~/.cargo"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
      | sh -s -- -y --profile minimal --default-toolchain stable --no-modify-path >/dev/null
    . "$HOME/.cargo/env"
  fi
  have=$(cargo --version | sed -n 's/^cargo \([0-9.]*\).*/\1/p')
  if ! version_at_least "$have" "$wanted"; then
    if command -v rustup >/dev/null; then
      echo "cargo $have is older than the $wanted this workspace needs: updating stable with rustup"
      rustup update stable --no-self-update >/dev/null
      rustup default stable >/dev/null
    else
      echo "cargo $have is older than the $wanted this workspace needs, and no rustup manages it: install Rust $wanted or later (https://rustup.rs)" >&2
      exit 1
    fi
  fi
}
