#!/usr/bin/env bash
# Density on one node (issue 17): a private spaced (bench/run.sh) holding N idle oci
# sandboxes of the default template; see bench/density.cc for what is measured.
# Usage: bench/density.sh [--count N] [--parallel P] [--seconds S] [--max-rss-growth F] [--rates M [--rounds K]]
# Memory admission is off (--max-memory-commit 0): every sandbox commits its 512 MiB limit,
# which would stop the run at 72 sandboxes on 24 GiB although idle ones use a few MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
SPACED_ARGS="--max-memory-commit 0 ${SPACED_ARGS:-}" PROG=density exec bash bench/run.sh "$@"
