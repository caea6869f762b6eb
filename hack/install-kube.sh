#!/usr/bin/env bash
# Installs the pinned local cluster: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kubectl, etcd, etcdctl and etcdutl (snapshot restore and status: etcdctl 3.6 has neither), built
# with the machine's Go toolchain from the Kubernetes Go modules pinned in hack/kube/go.mod.
# Binaries are cached outside the repository, keyed by version, and linked into .local/bin/, so a
# fresh clone on the same machine does not rebuild.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module="$repo/hack/kube"
kube_version=$(awk '($1 == "require" && $2 == "k8s.io/kubernetes") {print $3; exit} $1 == "k8s.io/kubernetes" {print $2; exit}' "$module/go.mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$module/go.mod")
[[ -n "$kube_version" && -n "$etcd_version" ]] || { echo "install-kube: cannot read pinned versions from $module/go.mod" >&2; exit 1; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/ansible-operator/kube-$kube_version-etcd-$etcd_version"
bin="$repo/.local/bin"
commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd etcdctl etcdutl)

missing=()
for cmd in "${commands[@]}"; do
  [[ -x "$cache/bin/$cmd" ]] || missing+=("$cmd")
done

if ((${#missing[@]})); then
  command -v go >/dev/null || { echo "install-kube: Go is required to build the control plane" >&2; exit 1; }
  echo "install-kube: building ${missing[*]} (Kubernetes $kube_version, etcd $etcd_version) with $(go version | cut -d' ' -f3); a cold build takes about 15 minutes on 2 cores"
  minor=${kube_version#v1.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
  done
  staging=$(mktemp -d "${cache%/*}/.build-XXXXXX" 2>/dev/null || { mkdir -p "${cache%/*}"; mktemp -d "${cache%/*}/.build-XXXXXX"; })
  trap 'rm -rf "$staging"' EXIT
  for cmd in "${missing[@]}"; do
    case "$cmd" in
      etcd) pkg=go.etcd.io/etcd/server/v3 ;;
      etcdctl) pkg=go.etcd.io/etcd/etcdctl/v3 ;;
      etcdutl) pkg=go.etcd.io/etcd/etcdutl/v3 ;;
      *) pkg=k8s.io/kubernetes/cmd/$cmd ;;
    esac
    echo "install-kube: go build $pkg"
    start=$SECONDS
    (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$staging/$cmd" "$pkg")
    echo "install-kube: built $cmd in $((SECONDS - start))s"
  done
  mkdir -p "$cache/bin"
  for cmd in "${missing[@]}"; do mv -f "$staging/$cmd" "$cache/bin/$cmd"; done
else
  echo "install-kube: Kubernetes $kube_version and etcd $etcd_version already built in $cache"
fi

mkdir -p "$bin"
for cmd in "${commands[@]}"; do
  ln -sfn "$cache/bin/$cmd" "$bin/$cmd"
done
echo "install-kube: linked ${commands[*]} into $bin"

# The control-plane release the KubernetesCluster sample installs on hosts, laid out as
# KUBE_RELEASES_DIR expects (like the etcd releases): .local/kube-releases/<version>/.
releases="$repo/.local/kube-releases/$kube_version"
mkdir -p "$releases"
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  ln -sfn "$cache/bin/$cmd" "$releases/$cmd"
done

# Our own small CRI client (hack/kube/cmd/cri-reset), rebuilt when its source changes.
if [[ ! -x "$bin/cri-reset" || "$module/cmd/cri-reset/main.go" -nt "$bin/cri-reset" ]]; then
  echo "install-kube: go build ./cmd/cri-reset"
  (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/cri-reset" ./cmd/cri-reset)
fi

