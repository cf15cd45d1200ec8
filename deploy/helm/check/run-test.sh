#!/usr/bin/env bash
# helm_chart_test: renders deploy/helm/space with helm under several values files and checks
# every object offline (strict decoding into Kubernetes' API types + the chart's own rules,
# see main.go and rules.go). Then the negative cases: values the chart must refuse, values it
# renders but the checker must reject, and rendered manifests mutated so that the checker must
# reject them, each for the reason expected (its message is matched).
# The flags the chart gives etcd and spaced are checked against the real binaries' --help:
# Debian's etcd (scripts/install-deps.sh installs etcd-server) and SPACED, when given.
#   usage: run-test.sh [--spaced PATH] [WORKDIR]   exit 0 pass, 1 fail, 77 skip (no go)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
chart="$here/../space"
kind_values="$here/../../kind/values.yaml"
spaced=""
if [ "${1:-}" = "--spaced" ]; then spaced="$2"; shift 2; fi
work="${1:-}"
if [ -z "$work" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

tools="$("$here/build-tools.sh")"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -ne 0 ] && { echo "FAIL: building helm and the checker (exit $rc)"; exit 1; }
helm=$(awk '$1=="helm"{print $2}' <<<"$tools")
check=$(awk '$1=="check"{print $2}' <<<"$tools")
"$helm" version --short

# helm keeps nothing of ours outside the work dir.
export HELM_CACHE_HOME="$work/helm/cache" HELM_CONFIG_HOME="$work/helm/config" HELM_DATA_HOME="$work/helm/data"
ns=space
passed=0 failed=0
pass() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

render() { # render OUT ARGS...: helm template into OUT; returns helm's status
  local out="$1"; shift
  "$helm" template sp "$chart" --namespace "$ns" "$@" >"$out" 2>"$out.err"
}

# Positive cases: lint, render, check with what each values file promises.
positive() { # positive NAME VALUES CHECK-FLAGS...
  local name="$1" values="$2"; shift 2
  local out="$work/$name.yaml"
  if ! "$helm" lint --strict "$chart" --namespace "$ns" -f "$values" >"$work/$name.lint" 2>&1; then
    fail "$name: helm lint --strict"; cat "$work/$name.lint"; return
  fi
  if ! render "$out" -f "$values"; then
    fail "$name: helm template"; cat "$out.err"; return
  fi
  if "$check" --namespace "$ns" "$@" "$out" >"$work/$name.check" 2>&1; then
    pass "$name: $(tail -1 "$work/$name.check")"
  else
    fail "$name: checker"; cat "$work/$name.check"
  fi
}
ext3="http://etcd-a.storage.svc.cluster.local:2379,http://etcd-b.storage.svc.cluster.local:2379,http://etcd-c.storage.svc.cluster.local:2379"
positive defaults "$chart/ci/default-values.yaml" --gateways 2
positive external-etcd "$chart/ci/external-etcd-values.yaml" --gateways 2 --external-etcd "$ext3"
positive existing-secret "$chart/ci/existing-secret-values.yaml" --gateways 2 --existing-secret space-credentials
positive gateway-only "$chart/ci/gateway-only-values.yaml" --gateways 5 --nodes=false \
  --existing-secret space-credentials \
  --external-etcd http://space-etcd-0.space-etcd.space.svc.cluster.local:2379
positive kind "$kind_values" --gateways 2
printf 'auth:\n  apiKeyKey: operator.key\n  tokenKeysKey: signing.json\n' >"$work/custom-keys-values.yaml"
positive custom-key-names "$work/custom-keys-values.yaml" --gateways 2

# What the renderings must say, beyond what the checker's rules know.
expect_in() { # expect_in NAME FILE TEXT
  if grep -qF -- "$3" "$2"; then pass "$1"; else fail "$1: no '$3' in $2"; fi
}
expect_in "external-etcd: node labels become --node-label" "$work/external-etcd.yaml" '- "zone=a"'
expect_in "existing-secret: --sandbox-domain passed" "$work/existing-secret.yaml" "- sandbox.example.test"
expect_not_in() { # expect_not_in NAME FILE TEXT
  if grep -qF -- "$3" "$2"; then fail "$1: '$3' in $2"; else pass "$1"; fi
}
expect_in "kind: etcd member 0" "$work/kind.yaml" "http://sp-space-etcd-0.sp-space-etcd.space.svc.cluster.local:2379"
expect_not_in "kind: no etcd member 1" "$work/kind.yaml" "sp-space-etcd-1"
expect_in "defaults: image tag is the appVersion" "$work/defaults.yaml" \
  "image: space:$(awk -F'"' '/^appVersion:/{print $2}' "$chart/Chart.yaml")"
# Two renderings generate different keys (nothing hard-coded), each usable.
render "$work/again.yaml" && ! cmp -s <(grep 'api-key:' "$work/defaults.yaml") <(grep 'api-key:' "$work/again.yaml") \
  && pass "defaults: generated api-key differs between installs" || fail "defaults: generated api-key is constant"

# NOTES.txt: helm renders it only at install, where an error in it fails the install. Render it
# here through a copy of the chart in which it is a named template, and check what it says.
notes() { # notes OUT ARGS...: the rendered NOTES into OUT
  local copy="$work/notes-chart" out="$1"; shift
  rm -rf "$copy" && cp -r "$chart" "$copy" || return 1
  { printf '{{- define "space.notes" -}}\n'; cat "$chart/templates/NOTES.txt"; printf '{{- end -}}\n'; } \
    >"$copy/templates/_notes.tpl"
  rm "$copy/templates/NOTES.txt"
  printf 'notes: {{ include "space.notes" . | toJson }}\n' >"$copy/templates/notes.yaml"
  "$helm" template sp "$copy" --namespace "$ns" --show-only templates/notes.yaml "$@" >"$out.raw" 2>"$out.err" &&
    /usr/bin/python3 -c 'import json,sys; l=[x for x in open(sys.argv[1]) if x.startswith("notes: ")][0]; print(json.loads(l[7:]))' \
      "$out.raw" >"$out"
}
if notes "$work/notes-default.txt"; then
  expect_in "NOTES: port-forward to the gateway" "$work/notes-default.txt" "port-forward service/sp-space-gateway 7070:7070"
  expect_in "NOTES: the API key from the Secret" "$work/notes-default.txt" "get secret sp-space-auth -o jsonpath='{.data.api-key}'"
  expect_in "NOTES: how to label machines" "$work/notes-default.txt" "kubectl label node MACHINE space.dev/node=true"
else
  fail "NOTES (defaults) do not render"; cat "$work/notes-default.txt.err"
fi
if notes "$work/notes-gw.txt" -f "$chart/ci/gateway-only-values.yaml" --set gateway.sandboxDomain=sb.test; then
  expect_in "NOTES: existing Secret named" "$work/notes-gw.txt" "get secret space-credentials"
  expect_in "NOTES: sandbox domain" "$work/notes-gw.txt" "*.sb.test"
  expect_not_in "NOTES: no node hints without nodes" "$work/notes-gw.txt" "kubectl label node"
else
  fail "NOTES (gateway-only) do not render"; cat "$work/notes-gw.txt.err"
fi

# The flags the chart passes exist in the binaries it runs.
flags_known() { # flags_known NAME HELP-FILE ARGS-FILE
  local name="$1" help="$2" args="$3" unknown="" f n=0
  for f in $(grep -o '^--[a-z0-9-]*' "$args" | sort -u); do
    n=$((n + 1))
    grep -qE -- "^[[:space:]]+(-[a-zA-Z], )?$f([ =,]|\$)" "$help" || unknown+=" $f"
  done
  if [ "$n" -eq 0 ]; then fail "$name: no flags found in $args"
  elif [ -n "$unknown" ]; then fail "$name: flags the binary does not know:$unknown"
  else pass "$name ($n flags)"; fi
}
if command -v etcd >/dev/null; then
  etcd --help >"$work/etcd.help" 2>&1
  "$check" --print-args etcd "$work/defaults.yaml" | sed 's/=.*//' >"$work/etcd.args"
  flags_known "etcd flags known to $(etcd --version | head -1)" "$work/etcd.help" "$work/etcd.args"
else
  fail "etcd flags: no etcd binary (scripts/install-deps.sh installs etcd-server)"
fi
if [ -n "$spaced" ]; then
  if "$spaced" --help >"$work/spaced.help" 2>&1; then
    # external-etcd gives the nodes --node-label; existing-secret the gateways --sandbox-domain.
    for c in node:external-etcd gateway:existing-secret; do
      "$check" --print-args "${c%%:*}" "$work/${c#*:}.yaml" | sed 's/=.*//' >"$work/${c%%:*}.args"
      flags_known "spaced flags of the ${c%%:*}" "$work/spaced.help" "$work/${c%%:*}.args"
    done
  else
    fail "spaced --help failed ($spaced)"; cat "$work/spaced.help"
  fi
fi

# Values the chart itself must refuse (values.schema.json or the templates' checks).
refused() { # refused NAME EXPECTED-MESSAGE HELM-ARGS...
  local name="$1" msg="$2"; shift 2
  if render "$work/refused.yaml" "$@"; then
    fail "refused $name: helm rendered it"
  elif grep -qF -- "$msg" "$work/refused.yaml.err"; then
    pass "refused $name"
  else
    fail "refused $name: helm failed, but not saying '$msg':"; cat "$work/refused.yaml.err"
  fi
}
refused "etcd.mode=bogus" "/etcd/mode': value must be one of" --set etcd.mode=bogus
refused "image.tag=latest" 'image tag "latest" is not pinned' --set image.tag=latest
refused "etcd.image.tag=latest" 'etcd.image: image tag "latest" is not pinned' --set etcd.image.tag=latest
refused "external etcd without endpoints" "etcd.mode=external needs etcd.endpoints" --set etcd.mode=external
refused "https etcd endpoint" "/etcd/endpoints/0': 'https://e:2379' does not match" --set etcd.mode=external --set 'etcd.endpoints={https://e:2379}'
refused "even etcd.replicas" "etcd.replicas must be odd" --set etcd.replicas=2
refused "pdb.minAvailable >= replicas" "must be below gateway.replicas" --set gateway.replicas=2 --set gateway.pdb.minAvailable=2
refused "misspelt top-level key" "additional properties 'gatway' not allowed" --set gatway.replicas=3
refused "misspelt nested key" "/gateway': additional properties 'replica' not allowed" --set gateway.replica=3
refused "string replicas" "/gateway/replicas': got string, want integer" --set-string gateway.replicas=two

# Values the chart renders, that the checker must reject.
rejected() { # rejected NAME EXPECTED-MESSAGE FILE CHECK-FLAGS...
  local name="$1" msg="$2" file="$3"; shift 3
  if "$check" --namespace "$ns" "$@" "$file" >"$work/rejected.out" 2>&1; then
    fail "rejected $name: the checker passed it"; return
  fi
  if grep -qF -- "$msg" "$work/rejected.out"; then
    pass "rejected $name"
  else
    fail "rejected $name: the checker failed, but not saying '$msg':"; cat "$work/rejected.out"
  fi
}
for v in privileged-gateway second-etcd-gateway; do
  render "$work/$v.yaml" -f "$here/bad/$v-values.yaml" || { fail "$v: helm template"; cat "$work/$v.yaml.err"; }
done
rejected "privileged gateway" "privileged; only the node DaemonSet may be" "$work/privileged-gateway.yaml"
rejected "gateway with a second --etcd" "--etcd given 2 times" "$work/second-etcd-gateway.yaml"
rejected "defaults checked as external etcd" "etcd is external, yet the chart renders" "$work/defaults.yaml" \
  --external-etcd "$ext3"
rejected "existing secret expected, generated one rendered" "nodes mount Secret \"sp-space-auth\", want the existing" \
  "$work/defaults.yaml" --existing-secret space-credentials
rejected "gateway replicas" "2 replicas, want 3" "$work/defaults.yaml" --gateways 3

# Rendered manifests mutated: each mutation must apply exactly where meant (else the case
# would test nothing), and the checker must reject the result for the expected reason.
mutate() { # mutate NAME FROM TO [COUNT]: replaces text in defaults.yaml into NAME.yaml
  /usr/bin/python3 - "$work/defaults.yaml" "$work/mut-$1.yaml" "$2" "$3" "${4:-1}" <<'PY'
import sys
src, dst, old, new, count = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
text = open(src).read()
n = text.count(old)
if n < count:
    sys.exit(f"mutation: {old!r} occurs {n} times, want at least {count}")
open(dst, "w").write(text.replace(old, new, count))
PY
}
mutated() { # mutated NAME FROM TO EXPECTED-MESSAGE
  if ! mutate "$1" "$2" "$3"; then fail "mutated $1: mutation did not apply"; return; fi
  rejected "mutated $1" "$4" "$work/mut-$1.yaml" --gateways 2
}
mutated unknown-field "      dnsPolicy: ClusterFirstWithHostNet" \
  "      dnsPolicy: ClusterFirstWithHostNet
      hostNetwrk: true" 'unknown field "spec.template.spec.hostNetwrk"'
mutated wrong-case-field "      hostPID: true" "      hostpid: true" 'unknown field "spec.template.spec.hostpid"'
mutated wrong-type "  replicas: 2" "  replicas: two" "cannot unmarshal string"
mutated duplicate-key "  replicas: 2" "  replicas: 2
  replicas: 3" 'already set in map'
mutated unknown-kind "kind: PodDisruptionBudget" "kind: PodDisruptionBudgett" "unknown kind policy/v1 PodDisruptionBudgett"
mutated pdb-selects-nothing "  minAvailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: space
      app.kubernetes.io/instance: sp
      app.kubernetes.io/component: gateway" "  minAvailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: space
      app.kubernetes.io/instance: sp
      app.kubernetes.io/component: gateways" "selects the pods of 0 workloads, want exactly 1"
mutated selector-mismatch "    matchLabels:
      app.kubernetes.io/name: space
      app.kubernetes.io/instance: sp
      app.kubernetes.io/component: node" "    matchLabels:
      app.kubernetes.io/name: space
      app.kubernetes.io/instance: sp
      app.kubernetes.io/component: nodes" "does not match its pod labels"
mutated latest-image "image: space:0.1.0" "image: space:latest" "is not pinned"
mutated untagged-image "image: space-etcd:3.4.23" "image: space-etcd" "has no tag"
mutated no-resources "          resources:
            limits:
              memory: 512Mi
            requests:
              cpu: 100m
              memory: 128Mi
          securityContext:
            allowPrivilegeEscalation: false" "          securityContext:
            allowPrivilegeEscalation: false" "no cpu request"
mutated etcd-endpoint-mismatch "- http://sp-space-etcd-0.sp-space-etcd.space.svc.cluster.local:2379,http://sp-space-etcd-1" \
  "- http://sp-space-etcd-0.sp-space-etcd.space.svc.cluster.local:2379,http://sp-space-etcd-7" "but etcd is at"
mutated hostnetwork-gateway "      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 65534" "      automountServiceAccountToken: false
      hostNetwork: true
      securityContext:
        runAsNonRoot: true
        runAsUser: 65534" "host namespaces (network true"
mutated writable-gateway "            readOnlyRootFilesystem: true
            runAsNonRoot: true" "            readOnlyRootFilesystem: false
            runAsNonRoot: true" "root filesystem is not read-only"
mutated node-not-privileged "            privileged: true" "            privileged: false" "spaced must be privileged"
mutated no-kvm "              mountPath: /dev/kvm" "              mountPath: /dev/kvm0" "host /dev/kvm mounted at /dev/kvm0"
mutated headless-not "  clusterIP: None" "  clusterIP: 10.0.0.10" "must be headless"
mutated rbac-wildcard 'verbs: ["get"]' 'verbs: ["*"]' "wildcard in a rule"
mutated bad-token-keys "  token-keys: " "  token-keys: e30K
  x-token-keys: " "token-keys (the --token-keys-file) is not"

echo "helm_chart_test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
