#!/usr/bin/env bash
# Installs the pinned Jaeger v2 backend (an OpenTelemetry Collector distribution with Jaeger's
# in-memory storage and query API) that tests/traces.rs sends the operator's traces to, built with
# the machine's Go toolchain from Jaeger's Go module at JAEGER_VERSION. The binary is cached outside
# the repository, keyed by version, and linked into .local/bin/jaeger.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The module version of github.com/jaegertracing/jaeger whose cmd/jaeger is the v2 backend.
version=${JAEGER_VERSION:-v1.76.0}
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ansible-operator/jaeger-$version"
bin="$repo/.local/bin"

if [[ ! -x "$cache/jaeger" ]]; then
  command -v go >/dev/null || { echo "install-jaeger: Go is required to build Jaeger" >&2; exit 1; }
  echo "install-jaeger: building github.com/jaegertracing/jaeger/cmd/jaeger@$version with $(go version | cut -d' ' -f3); a cold build takes about 7 minutes"
  start=$SECONDS
  # `go install pkg@version` refuses a module with replace directives: build inside the module.
  source=$(GOFLAGS=-mod=mod go mod download -json "github.com/jaegertracing/jaeger@$version" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$cache"
  staging=$(mktemp "$cache/.jaeger-XXXXXX")
  trap 'rm -f "$staging"' EXIT
  (cd "$source" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$staging" ./cmd/jaeger)
  mv -f "$staging" "$cache/jaeger"
  echo "install-jaeger: built jaeger in $((SECONDS - start))s"
else
  echo "install-jaeger: Jaeger $version already built in $cache"
fi

mkdir -p "$bin"
ln -sfn "$cache/jaeger" "$bin/jaeger"
echo "install-jaeger: linked jaeger into $bin"
