#!/usr/bin/env bash
# Builds the container images of the local cluster with podman (runc, cgroupfs), and loads them into
# the local node's containerd. No container registry is reachable here, so every image is made
# from Debian's archive: base images with debootstrap, the rest from them. Needs root and
# hack/install-node.sh. Images live in podman's storage in the user's cache, shared by every clone,
# and are built only when missing.
#
#   hack/images.sh base            the base images: Debian bookworm (debootstrap --variant=minbase)
#                                  and its python3 (the local stand-in for python:3.11-slim-bookworm);
#                                  with BASE_SUITE=trixie, Debian trixie and its Python 3.13
#   hack/images.sh node            the sandbox (pause) image and the memcached image
#   hack/images.sh operator-base IMG  the operator's base image (./Dockerfile's target `base`: what
#                                  an upstream project builds FROM), with the base images and the
#                                  binaries built on this host (BINARIES=prebuilt), tagged IMG
#   hack/images.sh operator IMG    the sample image (./Dockerfile's default target, FROM the base),
#                                  built the same way, tagged IMG
#   hack/images.sh load IMAGE...   copy images into the local node's containerd (namespace k8s.io),
#                                  skipping those it already has
#   hack/images.sh podman ARGS...  run podman on this storage (e.g. `images`)
#   hack/images.sh name IMAGE      the name of the pause, memcached, python or debian image
#
# Env: ANSIBLE_TOOLCHAIN (the Dockerfile's build argument), BASE_SUITE (the Debian release the
# operator images are built on: bookworm, Python 3.11, the default; or trixie, Python 3.13, which
# ansible-core 2.21 needs), CARGO_TARGET_DIR.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ansible-operator"
containerd_dir="$repo/.local/cluster/containerd"

# Debian's archive and its security archive, as this machine's apt reaches them.
debian_mirror=$("$repo/hack/debian-archive.sh" main)
security_mirror=$("$repo/hack/debian-archive.sh" security)
memcached_version=1.6.18-1+deb12u1

# The images of a Debian release: the debootstrapped base and its Python (names and packages).
suite_images() {
  debian_suite=$1
  case "$debian_suite" in
    bookworm)
      python_version=3.11
      python_packages=(python3=3.11.2-1+b1 python3-venv=3.11.2-1+b1 python-is-python3=3.11.2-1+deb12u1
        ca-certificates=20250419~deb12u2) ;;
    trixie)
      python_version=3.13
      python_packages=(python3=3.13.5-1 python3-venv=3.13.5-1 python-is-python3=3.13.3-1
        ca-certificates=20250419+deb13u1) ;;
    *) die "BASE_SUITE=$debian_suite: bookworm or trixie" ;;
  esac
  debian_image=localhost/local-cluster/debian:$debian_suite
  python_image=localhost/local-cluster/python:$python_version-$debian_suite
}

# Image names. A name without a registry is docker.io's, as the kubelet reads it; `localhost/`
# marks the images that exist only here.
pause_image=localhost/local-cluster/pause:1.0
memcached_image=localhost/memcached:${memcached_version%%-*}

log() { echo "images: $*"; }
die() { echo "images: $*" >&2; exit 1; }
suite_images bookworm

podman_() {
  podman --root "$cache/podman/storage" --runroot "/run/ansible-operator/podman" \
    --tmpdir "/run/ansible-operator/podman-tmp" --runtime runc --cgroup-manager cgroupfs \
    --events-backend file --storage-driver overlay "$@"
}

exists() { podman_ image exists "$1"; }

# Whether image $1 exists and was built from Containerfile $2 as it is now (its digest is the
# image's label `ansible-operator.dev/containerfile`), so a changed Containerfile rebuilds it.
current() {
  local digest
  digest=$(sha256sum "$2" | cut -d' ' -f1)
  exists "$1" &&
    [[ $(podman_ image inspect --format '{{index .Labels "ansible-operator.dev/containerfile"}}' "$1") == "$digest" ]]
}

# The build flag that labels an image with its Containerfile's digest (see current).
containerfile_label() { echo "--label=ansible-operator.dev/containerfile=$(sha256sum "$1" | cut -d' ' -f1)"; }

# The full reference containerd and the kubelet use for a name (`memcached:1` is
# docker.io/library/memcached:1).
normalized() {
  local name=$1 first=${1%%/*}
  if [[ "$name" != */* ]]; then
    echo "docker.io/library/$name"
  elif [[ "$first" == *.* || "$first" == *:* || "$first" == localhost ]]; then
    echo "$name"
  else
    echo "docker.io/$name"
  fi
}

# RUN steps reach Debian's archive (plain HTTP, signed) and PyPI through the host's network.
build() { podman_ build --network host --layers "$@"; }

# A build whose RUN steps use TLS (pip) trusts what the host trusts: its CA bundle and pip
# configuration (e.g. a TLS-intercepting proxy's CA) are mounted for the build only, so nothing of
# them is in the image.
build_trusting_host() {
  local args=()
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] &&
    args+=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
  [[ -f /etc/pip.conf ]] && args+=(--volume /etc/pip.conf:/etc/pip.conf:ro)
  build "${args[@]}" "$@"
}

base() {
  command -v debootstrap >/dev/null || die "debootstrap is missing; run hack/install-node.sh"
  if ! exists "$debian_image"; then
    log "making $debian_image with debootstrap --variant=minbase $debian_suite $debian_mirror (about a minute)"
    local rootfs
    rootfs=$(mktemp -d "$cache/.rootfs-XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$rootfs'" EXIT
    debootstrap --variant=minbase "$debian_suite" "$rootfs" "$debian_mirror" >"$rootfs.log" 2>&1 || {
      tail -n 20 "$rootfs.log" >&2
      die "debootstrap failed; log: $rootfs.log"
    }
    rm -f "$rootfs.log"
    # As in Debian's official images: the suite's updates and security archives, no services
    # started by package scripts, no apt caches.
    cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $debian_mirror $debian_suite main
deb $debian_mirror $debian_suite-updates main
deb $security_mirror $debian_suite-security main
EOF
    printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
    chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
    tar --numeric-owner -C "$rootfs" -c . |
      podman_ import --quiet --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' - "$debian_image" >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
  fi
  if ! exists "$python_image"; then
    log "building $python_image: ${python_packages[*]}"
    build --build-arg "BASE_IMAGE=$debian_image" --build-arg "PACKAGES=${python_packages[*]}" \
      -t "$python_image" -f "$repo/hack/node/python.Containerfile" "$repo/hack/node" >/dev/null
  fi
  log "base images: $debian_image, $python_image"
}

node() {
  base
  if ! exists "$pause_image"; then
    log "building $pause_image from hack/node/pause.c"
    local dir
    dir=$(mktemp -d)
    gcc -Os -s -static -o "$dir/pause" "$repo/hack/node/pause.c"
    cp "$repo/hack/node/pause.Containerfile" "$dir/"
    build -t "$pause_image" -f "$dir/pause.Containerfile" "$dir" >/dev/null
    rm -rf "$dir"
  fi
  local memcached_file="$repo/hack/node/memcached.Containerfile"
  if ! current "$memcached_image" "$memcached_file"; then
    log "building $memcached_image: memcached=$memcached_version"
    build --build-arg "BASE_IMAGE=$debian_image" --build-arg "MEMCACHED_VERSION=$memcached_version" \
      "$(containerfile_label "$memcached_file")" -t "$memcached_image" -f "$memcached_file" \
      "$repo/hack/node" >/dev/null
  fi
  log "node images: $pause_image, $memcached_image"
}

# The binaries a BINARIES=prebuilt build copies: the same commands as the Dockerfile's stages 1
# and 2, run on this host (Debian bookworm, as those stages' images).
prebuilt_binaries() {
  local out="$repo/.local/image" target=${CARGO_TARGET_DIR:-$repo/target} etcd_version
  etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$repo/hack/kube/go.mod")
  log "cargo build --release --locked --bin ansible-operator"
  "$repo/hack/cargo-target.sh"
  # Without the CARGO_* variables of a caller that cargo runs (a test: CARGO_PKG_NAME, ...): build
  # scripts that read them (ring's) would run again, and with them the whole release build.
  (
    cd "$repo"
    for name in $(compgen -e | grep '^CARGO_' | grep -vx 'CARGO_TARGET_DIR\|CARGO_HOME'); do unset "$name"; done
    cargo build --release --locked --bin ansible-operator
  )
  "$repo/hack/install-kube.sh" >/dev/null
  rm -rf "$out"
  mkdir -p "$out/etcd-releases/$etcd_version"
  cp "$target/release/ansible-operator" "$out/ansible-operator"
  for cmd in etcd etcdctl etcdutl; do
    cp "$(readlink -f "$repo/.local/bin/$cmd")" "$out/etcd-releases/$etcd_version/$cmd"
  done
  cp "$out/etcd-releases/$etcd_version/etcdctl" "$out/etcdctl"
  cp "$out/etcd-releases/$etcd_version/etcdutl" "$out/etcdutl"
}

# Builds ./Dockerfile's target $1 (base or sample) as image $2.
operator() {
  local target=$1 image
  image=$(normalized "${2:?usage: $0 operator|operator-base IMG}")
  suite_images "${BASE_SUITE:-bookworm}"
  base
  prebuilt_binaries
  log "podman build --target $target -t $image . (PYTHON_IMAGE=$python_image, BINARIES=prebuilt, ANSIBLE_TOOLCHAIN=${ANSIBLE_TOOLCHAIN:-2.18})"
  local start=$SECONDS
  build_trusting_host --build-arg "PYTHON_IMAGE=$python_image" --build-arg "PYTHON_VERSION=$python_version" \
    --build-arg BINARIES=prebuilt \
    --build-arg "ANSIBLE_TOOLCHAIN=${ANSIBLE_TOOLCHAIN:-2.18}" --target "$target" -t "$image" \
    -f "$repo/Dockerfile" "$repo"
  log "built $image in $((SECONDS - start))s"
  # Earlier builds' untagged stages: kept a day as the build cache, then removed.
  podman_ image prune -f --filter until=24h >/dev/null
}

load() {
  local sock="$containerd_dir/containerd.sock" name image id record
  [[ -S "$sock" ]] || die "the local node's containerd is not running ($sock); run hack/local-cluster.sh up"
  mkdir -p "$containerd_dir/loaded"
  for name in "$@"; do
    image=$(normalized "$name")
    id=$(podman_ image inspect --format '{{.Id}}' "$image" 2>/dev/null) || die "no image $image; build it first"
    record="$containerd_dir/loaded/${image//[\/:]/_}"
    if [[ -f "$record" && "$(<"$record")" == "$id" ]] &&
      ctr --address "$sock" --namespace k8s.io images ls -q "name==$image" | grep -qx "$image"; then
      continue
    fi
    log "loading $image into the local node's containerd"
    podman_ save --format docker-archive "$image" |
      ctr --address "$sock" --namespace k8s.io images import - >/dev/null
    echo "$id" >"$record"
  done
}

case "${1:-}" in
  base) suite_images "${BASE_SUITE:-bookworm}"; base ;;
  node) node ;;
  operator) shift; operator sample "$@" ;;
  operator-base) shift; operator base "$@" ;;
  load) shift; load "$@" ;;
  podman) shift; podman_ "$@" ;;
  name)
    case "${2:-}" in
      pause) echo "$pause_image" ;; memcached) echo "$memcached_image" ;;
      python) echo "$python_image" ;; debian) echo "$debian_image" ;;
      *) die "usage: $0 name pause|memcached|python|debian" ;;
    esac ;;
  *) die "usage: $0 base|node|operator IMG|operator-base IMG|load IMAGE...|podman ARGS...|name IMAGE" ;;
esac
