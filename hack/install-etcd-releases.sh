#!/usr/bin/env bash
# The etcd releases the EtcdCluster sample installs on hosts, laid out as ETCD_RELEASES_DIR expects:
# .local/etcd-releases/v<version>/{etcd,etcdctl}, and etcdutl for the current release (an EtcdRestore
# needs it; the previous release has none). The current release is the one hack/install-kube.sh
# built (run it first); the previous one, pinned in hack/etcd-previous/go.mod, is built here (about
# 30 s, cached outside the repository) so a rolling upgrade can be exercised.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
releases="$repo/.local/etcd-releases"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/ansible-operator"
pinned() { awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$1/go.mod"; }

link() {
  local version=$1 from=$2 cmd
  shift 2
  mkdir -p "$releases/$version"
  for cmd in "$@"; do
    [[ -x "$from/$cmd" ]] || { echo "install-etcd-releases: $from/$cmd is missing" >&2; exit 1; }
    ln -sfn "$from/$cmd" "$releases/$version/$cmd"
  done
}

current=$(pinned "$repo/hack/kube")
link "$current" "$repo/.local/bin" etcd etcdctl etcdutl

module="$repo/hack/etcd-previous"
previous=$(pinned "$module")
cache="$cache_root/etcd-$previous/bin"
if [[ ! -x "$cache/etcd" || ! -x "$cache/etcdctl" ]]; then
  echo "install-etcd-releases: building etcd $previous"
  mkdir -p "$cache"
  for pkg in etcd:go.etcd.io/etcd/server/v3 etcdctl:go.etcd.io/etcd/etcdctl/v3; do
    (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$cache/${pkg%%:*}.new" "${pkg#*:}")
    mv -f "$cache/${pkg%%:*}.new" "$cache/${pkg%%:*}"
  done
fi
link "$previous" "$cache" etcd etcdctl
echo "install-etcd-releases: $releases has $previous and $current"
