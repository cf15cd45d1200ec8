#!/usr/bin/env bash
# Runs a pytest suite against a real spaced (the ctest entries python_sdk_test and
# e2b_python_sdk_test, tests/CMakeLists.txt):
#   1. makes the pinned venv (venv.sh: Debian's /usr/bin/python3, requirements.lock),
#   2. with --wheel DIR, builds that package's wheel (pip wheel --no-deps, the pinned
#      setuptools, from a copy of the source) and installs it into the venv,
#   3. starts spaced on a free loopback port with a temporary data dir (/tmp/space-it-*, so
#      the integration_cleanup step finds it if this script is killed),
#   4. runs pytest with only the SDK's own environment variables (--env space: SPACE_URL,
#      SPACE_API_KEY; --env e2b: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY),
#   5. deletes what is left, stops spaced by its PID and removes everything it left.
# Exit: pytest's code (5, no tests collected, is turned into a failure), 77 to skip (not
# root, no crun/busybox, registry unreachable for the first venv).
# Usage: run_pytest.sh BIN_DIR SUITE_DIR --env space|e2b [--wheel SRC_DIR] [--lock LOCK]
#          [--https] [--spaced-arg ARG]… [-- PYTEST_ARGS…]
# (--https: spaced also serves TLS (--tls-self-signed, docs/tls.md); the SDK's URLs are its
# https:// ones, and the tests trust its CA: SSL_CERT_FILE and SPACE_TLS_CA name it.)
# (--lock: another requirements.lock, with a venv of its own; tests/openapi uses it.)
# (SPACED_ARGS is also exported to the tests as SPACE_SPACED_ARGS, space-separated.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BIN=$(cd "${1:?usage: run_pytest.sh BIN_DIR SUITE_DIR --env space|e2b [--wheel DIR]}" && pwd)
SUITE=$(cd "${2:?suite dir}" && pwd)
shift 2
ENV_KIND="" WHEEL_SRC="" LOCK_FILE="" HTTPS="" PYTEST_ARGS=() SPACED_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --env) ENV_KIND=$2; shift 2 ;;
    --wheel) WHEEL_SRC=$(cd "$2" && pwd); shift 2 ;;
    --lock) LOCK_FILE=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
    --spaced-arg) SPACED_ARGS+=("$2"); shift 2 ;;
    --https) HTTPS=1; SPACED_ARGS+=(--tls-self-signed); shift ;;
    --) shift; PYTEST_ARGS=("$@"); break ;;
    *) echo "run_pytest: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$ENV_KIND" in space|e2b) ;; *) echo "run_pytest: --env space|e2b is required" >&2; exit 2 ;; esac

if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root (namespaces, cgroups, loop devices)"; exit 77; fi
if [ ! -x /usr/bin/crun ] || [ ! -x /bin/busybox ]; then echo "SKIP: needs crun and busybox-static (make deps)"; exit 77; fi

VENV="$BIN/../python-venv"
if [ -n "$LOCK_FILE" ]; then VENV="$BIN/../python-venv-$(basename "$(dirname "$LOCK_FILE")")"; fi
"$here/venv.sh" "$VENV" ${LOCK_FILE:+"$LOCK_FILE"}
rc=$?
if [ $rc -eq 77 ]; then echo "SKIP: cannot install the pinned Python packages (registry unreachable)"; exit 77; fi
[ $rc -eq 0 ] || { echo "run_pytest: making the venv failed" >&2; exit 1; }
PY="$VENV/bin/python"

tmp=$(mktemp -d /tmp/space-it-XXXXXX)
chmod 711 "$tmp"  # the sandboxes' unprivileged root must traverse down to the data dir
data="$tmp/data"
spaced_pid=""
cleanup() {
  if [ -n "$spaced_pid" ] && kill -0 "$spaced_pid" 2>/dev/null; then
    # Whatever a failed test left behind: delete it through the API while spaced lives.
    if [ -s "$data/url" ] && [ -s "$data/api-key" ]; then
      SPACE_URL=$(cat "$data/url") SPACE_API_KEY=$(cat "$data/api-key") "$PY" - <<'PYEOF' || true
import json, os, urllib.request
url, key = os.environ["SPACE_URL"].strip(), os.environ["SPACE_API_KEY"].strip()
def call(method, path):
    req = urllib.request.Request(url + path, method=method, headers={"Authorization": "Bearer " + key})
    with urllib.request.urlopen(req, timeout=90) as r:
        return json.loads(r.read() or b"{}")
for sb in call("GET", "/v1/sandboxes").get("sandboxes", []):
    try:
        call("DELETE", f"/v1/sandboxes/{sb['id']}?wait=60s&delete_snapshots=1")
        print(f"cleanup: deleted leftover sandbox {sb['id']}")
    except Exception as e:
        print(f"cleanup: deleting {sb['id']}: {e}")
PYEOF
    fi
    kill -TERM "$spaced_pid" 2>/dev/null
    for _ in $(seq 1 300); do kill -0 "$spaced_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$spaced_pid" 2>/dev/null || true
    wait "$spaced_pid" 2>/dev/null || true
  fi
  bash "$repo/scripts/space-down.sh" "$data" --purge >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

if [ -n "$WHEEL_SRC" ]; then
  # Built from a copy: setuptools writes build/ and *.egg-info next to the sources.
  cp -r "$WHEEL_SRC" "$tmp/wheel-src"
  rm -rf "$tmp/wheel-src/build" "$tmp/wheel-src/dist" "$tmp/wheel-src"/src/*.egg-info
  if ! "$VENV/bin/pip" wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
      --no-index -w "$tmp/dist" "$tmp/wheel-src" >"$tmp/wheel.log" 2>&1; then
    cat "$tmp/wheel.log"; echo "run_pytest: building the wheel failed" >&2; exit 1
  fi
  whl=$(ls "$tmp"/dist/*.whl)
  if ! "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-index \
      --force-reinstall "$whl" >"$tmp/wheel.log" 2>&1; then
    cat "$tmp/wheel.log"; echo "run_pytest: installing $whl failed" >&2; exit 1
  fi
  echo "run_pytest: installed $(basename "$whl")"
fi

agent_args=()
if [ -n "${SPACE_TEST_AGENT:-}" ]; then agent_args=(--agent-binary "$SPACE_TEST_AGENT"); fi
# If this script is killed (a ctest timeout), spaced dies with it (setpriv --pdeathsig), and
# integration_cleanup removes the sandboxes it left.
setpriv --pdeathsig KILL -- "$BIN/spaced" --listen 127.0.0.1:0 --data-dir "$data" --log-level warn \
  --max-file-bytes 8388608 "${SPACED_ARGS[@]}" "${agent_args[@]}" >"$tmp/spaced.log" 2>&1 &
spaced_pid=$!
for _ in $(seq 1 600); do
  if ! kill -0 "$spaced_pid" 2>/dev/null; then
    echo "run_pytest: spaced exited during start-up:"; cat "$tmp/spaced.log"; exit 1
  fi
  if [ -s "$data/url" ] && [ -s "$data/api-key" ] &&
     curl -fsS --noproxy '*' -m 2 "$(cat "$data/url")/healthz" >/dev/null 2>&1; then
    break
  fi
  sleep 0.1
done
url=$(cat "$data/url" 2>/dev/null) key=$(cat "$data/api-key" 2>/dev/null)
[ -n "$url" ] || { echo "run_pytest: spaced did not come up in 60 s:"; cat "$tmp/spaced.log"; exit 1; }
plain_url=$url
tls_env=()
if [ -n "$HTTPS" ]; then
  ca="$data/tls/ca.pem"
  [ -s "$ca" ] || { echo "run_pytest: spaced made no $ca"; cat "$tmp/spaced.log"; exit 1; }
  # The same port, over TLS (the certificate names 127.0.0.1).
  url="https://${url#http://}"
  curl -fsS --noproxy '*' -m 5 --cacert "$ca" "$url/healthz" >/dev/null ||
    { echo "run_pytest: $url/healthz fails over TLS"; cat "$tmp/spaced.log"; exit 1; }
  tls_env=("SSL_CERT_FILE=$ca" "SPACE_TLS_CA=$ca")
fi

# The test process sees none of a developer's own SPACE_/E2B_ settings, only these.
env_args=(-u SPACE_URL -u SPACE_API_KEY -u E2B_API_URL -u E2B_SANDBOX_URL -u E2B_API_KEY
          -u E2B_DOMAIN -u E2B_ACCESS_TOKEN -u E2B_DEBUG -u SSL_CERT_FILE -u SSL_CERT_DIR -u SPACE_TLS_CA)
if [ "$ENV_KIND" = space ]; then
  env_args+=("SPACE_URL=$url" "SPACE_API_KEY=$key")
else
  # An operator key in E2B's shape (e2b_ + hex), as `space keys create --e2b` makes it: some
  # E2B SDK releases refuse any other key client-side.
  e2b_key=$(curl -fsS --noproxy '*' -m 10 -X POST -H "Authorization: Bearer $key" \
    -H 'Content-Type: application/json' -d '{"name":"e2b-suite","format":"e2b"}' "$plain_url/v1/keys" |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["key"])') ||
    { echo "run_pytest: making an e2b_ API key failed"; exit 1; }
  env_args+=("E2B_API_URL=$url" "E2B_SANDBOX_URL=$url" "E2B_API_KEY=$e2b_key")
fi
# The fake internet's connection log, when the caller made one (E2bPythonSdkTest).
if [ -n "${SPACE_FAKE_INTERNET_LOG:-}" ]; then env_args+=("SPACE_FAKE_INTERNET_LOG=$SPACE_FAKE_INTERNET_LOG"); fi
env_args+=("SPACE_SPACED_ARGS=${SPACED_ARGS[*]}" SPACE_MAX_FILE_BYTES=8388608 PYTHONDONTWRITEBYTECODE=1 "PYTHONPATH="
          "${tls_env[@]}")

cd "$SUITE"
# (pytest, like spaced, dies with this script.)
setpriv --pdeathsig KILL -- env "${env_args[@]}" "$PY" -m pytest -p no:cacheprovider -v --tb=short --durations=5 \
  "${PYTEST_ARGS[@]}" "$SUITE"
rc=$?
if [ $rc -eq 5 ]; then
  echo "run_pytest: pytest collected no tests (exit 5): that is a failure"; rc=1
fi
if [ $rc -ne 0 ]; then
  echo "---- spaced log ($tmp/spaced.log, last 80 lines) ----"; tail -n 80 "$tmp/spaced.log"
fi
exit $rc
