#!/usr/bin/env bash
# Builds helm and the manifest checker from this module's pinned go.mod/go.sum (no version
# floats: -mod=readonly, and the Go toolchain installed on the machine), once per content:
# the binaries are cached under ${SPACE_CACHE_DIR:-~/.cache/space}/helm-tools/NAME-<hash>/, helm's
# by the hash of go.mod+go.sum, the checker's by that and its sources. Prints that directory's
# helm and check paths, one per line ("helm PATH", "check PATH").
#   usage: build-tools.sh            (exit 77 when go is not installed)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local
export GOFLAGS="-mod=readonly -buildvcs=false -trimpath"
export CGO_ENABLED=0
if [ -x /usr/local/go/bin/go ] && ! command -v go >/dev/null; then PATH="/usr/local/go/bin:$PATH"; fi
if ! command -v go >/dev/null; then
  echo "build-tools: go is not installed" >&2
  exit 77
fi
# go keeps its module and build caches under HOME unless told otherwise (GOMODCACHE, GOCACHE).
if [ -z "${HOME:-}" ]; then HOME="$(getent passwd "$(id -u)" | cut -d: -f6)"; export HOME; fi
cache="${SPACE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/space}/helm-tools"
mkdir -p "$cache"
mod_hash=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
src_hash=$(cat "$here/go.mod" "$here/go.sum" "$here"/*.go | sha256sum | cut -c1-16)
helm="$cache/helm-$mod_hash/helm"
check="$cache/check-$src_hash/check"

# One builder at a time per cache (parallel test runs share it); the others wait and reuse.
exec 9>"$cache/.lock"
flock 9

build() { # build OUT PACKAGE [LDFLAGS]
  local out="$1" pkg="$2" ldflags="${3:-}" tmp
  tmp="$(mktemp -d "$cache/.build.XXXXXX")"
  ( cd "$here" && go build -ldflags "$ldflags" -o "$tmp/bin" "$pkg" )
  mkdir -p "$(dirname "$out")"
  mv -f "$tmp/bin" "$out"
  rmdir "$tmp"
}

if [ ! -x "$helm" ]; then
  echo "build-tools: building helm (go.mod+go.sum $mod_hash; several minutes the first time)" >&2
  # The version stamps helm's own Makefile sets: its version, and the Kubernetes version it
  # renders for by default (client-go v0.X.Y -> 1.X), which `kubeVersion` checks compare to.
  helm_ver=$(cd "$here" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
  kube_minor=$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_ver"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
  done
  build "$helm" helm.sh/helm/v3/cmd/helm "$ld"
fi
if [ ! -x "$check" ]; then
  echo "build-tools: building the checker ($src_hash)" >&2
  build "$check" . "-s -w"
fi
echo "helm $helm"
echo "check $check"
