#!/usr/bin/env bash
# Installs, with apt-get, whatever SPACE needs to build, run and test that is missing.
# Idempotent and quiet when everything is present. Needs root (or sudo) on Debian 12.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build ccache pkg-config git
  libboost-dev libboost-system-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev
  libssl-dev openssl libsodium-dev libseccomp-dev libexpected-dev libarchive-dev zlib1g-dev libzstd-dev libsqlite3-dev libcurl4-openssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
  crun runc btrfs-progs busybox-static util-linux iproute2 procps curl python3 python3-requests
  nftables dnsmasq-base zstd
  runsc
  python3-venv
  nodejs
  qemu-system-x86 qemu-utils linux-image-cloud-amd64 lz4 cpio e2fsprogs kmod
  prometheus tmux
  chromium
  debootstrap
  etcd-server
  python3-ipykernel python3-jupyter-client python3-matplotlib python3-pytest node-acorn
  libnss-myhostname
)
# qemu-system-x86 brings qemu-system-common, whose /usr/lib/qemu/virtiofsd serves named
# volumes to microVMs (docs/volumes.md; Debian 12 has no separate virtiofsd package).
# zstd: template_build_test lists a template archive with `tar --zstd`.
# chromium: the web console's browser tests (console_e2e_test) drive Debian's build with
# playwright-core; no browser is ever downloaded.
# prometheus: its promtool validates GET /metrics (metrics_test). tmux: the interactive CLI
# (space shell, exec -t) is driven in a tmux pane (cli_tty_test).
# python3-ipykernel, python3-jupyter-client, python3-matplotlib, python3-pytest, node-acorn:
# the code-interpreter kernel runner (templates/code-interpreter) and its suite (kernel_test).
# debootstrap: spaced makes the debian:bookworm built-in template with it (templates/,
# docs/templates.md), the base of python and code-interpreter.
# etcd-server: the cluster's shared state (src/cluster, etcd_test; docs/cluster.md).
# libnss-myhostname: resolves every *.localhost name to loopback (its postinst adds
# `myhostname` to the hosts line of /etc/nsswitch.conf), as browsers do by themselves: the E2B
# SDK suites reach port URLs by the names the SDK builds (`https://${getHost(port)}`).
# runsc: gVisor, for the shipped gvisor runtime plugin (plugins/runtime/gvisor).
# python3-venv: the Python SDK tests make a venv with /usr/bin/python3 (tests/python/venv.sh).
# npm (the E2B SDK compatibility tests install the pinned SDK with `npm ci`): Debian's
# package, unless the installed nodejs already brings its own npm.
if ! command -v npm >/dev/null 2>&1; then PKGS+=(npm); fi
# --bench: also what the benchmarks run beside SPACE (bench/peer.sh: Debian's podman).
if [ "${1:-}" = "--bench" ]; then PKGS+=(podman); fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
# Debian's etcd-server starts a system etcd on :2379 when installed. SPACE runs its own
# members (scripts/devcluster.sh, the tests): the one installed here is stopped and left
# disabled, unless it was there before.
if [[ " ${missing[*]} " == *" etcd-server "* ]] && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
fi
