#!/usr/bin/env bash
# Code interpreter benchmark (docs/benchmarks.md, "Code interpreter"): against a running
# spaced, with the built-in code-interpreter template (prepared first if missing):
#   - through the unmodified E2B JS SDK (@e2b/code-interpreter, tests/e2b/code-interpreter's
#     lock, npm ci'd into BUILD_DIR/bench-e2b-code-interpreter): Sandbox.create() -> first
#     runCode('1+1') result, and runCode('1+1') round trips on a warm (default) context;
#   - the baseline: the same /execute of 1+1 made inside the sandbox (python http.client
#     to 127.0.0.1:49999, keep-alive), no spaced and no SDK;
#   - through the CLI: `space create -t code-interpreter` -> first `space run-code` result
#     (a new context), and `space run-code --context C` of 1+1 on a warm context (each a
#     whole CLI process).
# Usage: SPACE_URL=http://127.0.0.1:7070 SPACE_API_KEY=... bench/code.sh [BUILD_DIR] [CREATES] [ROUND_TRIPS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(cd "${1:-build}" && pwd)
CREATES=${2:-5}
TRIPS=${3:-20}
SPACE="$BUILD/bin/space"
: "${SPACE_URL:?set SPACE_URL}" "${SPACE_API_KEY:?set SPACE_API_KEY}"

echo "preparing the code-interpreter template…" >&2
# A wait is capped at 5 minutes a request and a build on a cache miss can take longer:
# follow the operation until it has ended.
op=$(curl -fsS --noproxy '*' -X POST -H "Authorization: Bearer $SPACE_API_KEY" -H 'Content-Type: application/json' \
  "$SPACE_URL/v1/templates?wait=300s" -d '{"builtin":"code-interpreter"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["operation"]["id"])')
for _ in $(seq 1 6); do
  state=$(curl -fsS --noproxy '*' -H "Authorization: Bearer $SPACE_API_KEY" "$SPACE_URL/v1/operations/$op?wait=300s" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  case "$state" in succeeded) break ;; failed) echo "preparing the template failed (operation $op)" >&2; exit 1 ;; esac
done
[ "$state" = succeeded ] || { echo "the template was not ready after 30 minutes (operation $op)" >&2; exit 1; }

# Seconds since the epoch (ns resolution), and the milliseconds between two of them.
now() { date +%s.%N; }
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }
# p50 p90 mean of the numbers on stdin (ms).
stats() { sort -n | awk '{v[NR]=$1; s+=$1} END {i50=int((NR+1)*0.5); i90=int(NR*0.9+0.999); if (i90<1) i90=1;
  printf "p50 %.1f ms, p90 %.1f ms, mean %.1f ms (n=%d)", v[i50], v[i90], s/NR, NR}'; }

# ---- E2B JS SDK
WORK="$BUILD/bench-e2b-code-interpreter"
mkdir -p "$WORK"
cp tests/e2b/code-interpreter/package.json tests/e2b/code-interpreter/package-lock.json bench/code_e2b.mjs "$WORK/"
if ! cmp -s "$WORK/package-lock.json" "$WORK/node_modules/.space-lock" 2>/dev/null; then
  (cd "$WORK" && npm ci --no-audit --no-fund --loglevel=error >&2 && cp package-lock.json node_modules/.space-lock)
fi
echo "E2B JS SDK: $CREATES creates, $TRIPS warm round trips…" >&2
json=$(cd "$WORK" && env -u E2B_DOMAIN -u E2B_DEBUG E2B_API_URL="$SPACE_URL" E2B_SANDBOX_URL="$SPACE_URL" \
  E2B_API_KEY="$SPACE_API_KEY" node code_e2b.mjs "$CREATES" "$TRIPS")
field() { node -e 'const o=JSON.parse(process.argv[1]); for (const v of o[process.argv[2]]) console.log(v)' "$json" "$1"; }
echo "e2b  Sandbox.create():                     $(field create | stats)"
echo "e2b  first runCode('1+1') after create:    $(field first_result | stats)"
echo "e2b  create -> first runCode result:       $(field create_to_first_result | stats)"
echo "e2b  runCode('1+1'), warm context:         $(field warm | stats)"
echo "baseline: /execute 1+1 inside the sandbox:  $(field inside | stats)"

# ---- space CLI
echo "space CLI: $CREATES creates, $TRIPS warm round trips…" >&2
c2f=() ; warm=()
for i in $(seq 1 "$CREATES"); do
  t0=$(now)
  id=$("$SPACE" create -t code-interpreter --timeout 300)
  out=$(echo '1+1' | "$SPACE" --json run-code "$id" -)
  t1=$(now)
  c2f+=("$(ms_between "$t0" "$t1")")
  [ "$(echo "$out" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).results[0].text))')" = 2 ]
  if [ "$i" -eq "$CREATES" ]; then
    ctx=$(echo "$out" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).context.id))')
    for _ in 1 2 3; do echo '1+1' | "$SPACE" run-code --context "$ctx" "$id" - >/dev/null; done
    for _ in $(seq 1 "$TRIPS"); do
      t0=$(now)
      r=$(echo '1+1' | "$SPACE" run-code --context "$ctx" "$id" -)
      t1=$(now)
      [ "$r" = 2 ] || { echo "space run-code gave: $r" >&2; exit 1; }
      warm+=("$(ms_between "$t0" "$t1")")
    done
  fi
  "$SPACE" rm "$id" >/dev/null
done
echo "space create -> first run-code result:     $(printf '%s\n' "${c2f[@]}" | stats)"
echo "space run-code 1+1 --context C (warm):     $(printf '%s\n' "${warm[@]}" | stats)"
