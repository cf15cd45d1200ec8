#!/usr/bin/env bash
# Runs the space-kernel suite (tests/kernel, ctest entry kernel_test) with Debian's
# /usr/bin/python3, which sees python3-ipykernel, python3-jupyter-client,
# python3-matplotlib and python3-pytest (scripts/install-deps.sh); node runs the
# JavaScript contexts (with Debian's node-acorn). The daemons it starts listen on a free
# loopback port and temp unix sockets, and are stopped by their PID.
# Exit: pytest's code; 5 (no tests collected) becomes a failure.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONDONTWRITEBYTECODE=1  # keep __pycache__ out of templates/code-interpreter
for mod in ipykernel jupyter_client matplotlib pytest; do
  if ! /usr/bin/python3 -c "import $mod" 2>/dev/null; then
    echo "kernel_test: /usr/bin/python3 cannot import $mod (run scripts/install-deps.sh)" >&2
    exit 1
  fi
done
cd "$here"
/usr/bin/python3 -m pytest -p no:cacheprovider -q "$@" .
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "kernel_test: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
