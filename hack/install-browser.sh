#!/usr/bin/env bash
# Installs the pinned headless browser the console's end-to-end test drives: Debian's chromium and
# chromium-driver (WebDriver), same version. Needs root (apt). Idempotent.
set -euo pipefail

version="${CHROMIUM_VERSION:-156.0.8078.79-1~deb12u1}"
log() { echo "install-browser: $*"; }

installed() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
if [[ "$(installed chromium)" == "$version" && "$(installed chromium-driver)" == "$version" ]]; then
  log "chromium and chromium-driver $version already installed"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-browser: installing chromium needs root (apt-get)" >&2
  exit 1
fi
log "installing chromium and chromium-driver $version"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if ! apt-get install -y -qq --no-install-recommends "chromium=$version" "chromium-driver=$version" \
  "chromium-common=$version" >/dev/null; then
  echo "install-browser: chromium $version is not in Debian's archive any more; set CHROMIUM_VERSION to one that is (apt-cache policy chromium)" >&2
  exit 1
fi
log "ok: $(chromium --version 2>/dev/null), $(chromedriver --version 2>/dev/null | head -1)"
