#!/usr/bin/env bash
# SPACE beside a peer (issue 17, docs/benchmarks.md "Beside podman"): bench/peer.py against a
# private spaced (bench/run.sh), with Debian's podman (runc) on the same rootfs.
#   bench/peer.sh [--n 20]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --bench
PROG=peer.py exec bash bench/run.sh "$@"
