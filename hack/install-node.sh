#!/usr/bin/env bash
# Installs what the local cluster's node and the image builds need, from Debian's archive, pinned:
# containerd and runc (the node's container runtime), the CNI plugins (the Pod network bridge),
# podman (builds the images), debootstrap (makes their base images from Debian's archive) and
# socat (forwards the `kubernetes` Service address to the API server). Needs root.
# Nothing is started: containerd's Debian package ships only a systemd unit, and hack/local-cluster.sh
# runs containerd itself with its own configuration.
set -euo pipefail

packages=(
  containerd=1.6.20~ds1-1+deb12u3
  runc=1.1.5+ds1-1+deb12u1
  containernetworking-plugins=1.1.1+ds1-3+b5
  podman=4.3.1+ds1-8+deb12u1+b3
  debootstrap=1.0.128+nmu2+deb12u2
  socat=1.7.4.4-2
)

log() { echo "install-node: $*"; }
die() { echo "install-node: $*" >&2; exit 1; }

missing=()
for spec in "${packages[@]}"; do
  name=${spec%%=*} version=${spec#*=}
  installed=$(dpkg-query -W -f='${db:Status-Status} ${Version}' "$name" 2>/dev/null || true)
  [[ "$installed" == "installed $version" ]] || missing+=("$spec")
done

if ((${#missing[@]} == 0)); then
  log "already installed: ${packages[*]}"
  exit 0
fi
[[ $(id -u) == 0 ]] || die "installing ${missing[*]} needs root"
command -v gcc >/dev/null || die "gcc is required to build the sandbox image's pause binary"
log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null 2>&1 || {
  log "apt-get update"
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null
}
log "installed ${packages[*]}"
