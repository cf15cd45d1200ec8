#!/usr/bin/env bash
# Makes (or reuses) the Python virtual environment of the SDK tests: Debian's /usr/bin/python3
# (3.11, with python3-venv from scripts/install-deps.sh) and exactly the packages of
# requirements.lock, checked against their hashes. Content-cached: the venv is rebuilt only
# when the lock file or the interpreter changes (the venv's space-stamp records both). Safe to run concurrently.
# Usage: tests/python/venv.sh VENV_DIR [LOCK]   exit 0 ready, 77 registry unreachable, else failed
# (LOCK defaults to tests/python/requirements.lock; tests/openapi has its own.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
VENV=${1:?usage: venv.sh VENV_DIR}
PY=${SPACE_PYTHON:-/usr/bin/python3}
LOCK=${2:-$here/requirements.lock}
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
# The stamp: the lock and the interpreter it was installed for.
stamp() { cat "$LOCK"; echo "# $("$PY" -c 'import sys; print(sys.executable, sys.version)' 2>&1)"; }
if [ -x "$VENV/bin/python" ] && [ "$(stamp)" = "$(cat "$VENV/space-stamp" 2>/dev/null)" ]; then
  exit 0
fi
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "venv: $PY has no venv/ensurepip module (scripts/install-deps.sh installs python3-venv)" >&2
  exit 1
fi
echo "venv: creating $VENV from $(basename "$LOCK")" >&2
rm -rf "$VENV"
"$PY" -m venv "$VENV"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --no-deps: the lock lists every package itself; --require-hashes: nothing else gets in.
if ! "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input --no-deps \
    --require-hashes --only-binary=:all: -r "$LOCK" >"$log" 2>&1; then
  cat "$log" >&2
  rm -rf "$VENV"
  if grep -qE 'NewConnectionError|Temporary failure in name resolution|Network is unreachable|ConnectTimeout|Max retries exceeded' "$log"; then
    echo "venv: the package registry is unreachable" >&2
    exit 77
  fi
  exit 1
fi
stamp >"$VENV/space-stamp"
