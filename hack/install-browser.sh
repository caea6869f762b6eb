#!/usr/bin/env bash
# Installs the pinned headless browser the console's end-to-end test drives: Debian's chromium and
# chromium-driver (WebDriver), same version. Needs root (apt). Idempotent.
#
# Debian's security archive keeps only the newest build of chromium: the build pinned here vanishes
# at the next security update. So the pin is a release line (CHROMIUM_LINE, its major version): the
# newest build of that line in the archive is installed, the same for the browser and its driver;
# when the archive has moved past the line, its current build is installed with a warning.
set -euo pipefail

line="${CHROMIUM_LINE:-156}"
log() { echo "install-browser: $*"; }

# The newest version of chromium in the archive on the pinned line, else the archive's candidate.
pick_version() {
  local versions pick
  versions=$(apt-cache madison chromium | awk '{print $3}')
  pick=$(grep -E "^${line}\." <<<"$versions" | sort -V | tail -n 1 || true)
  if [[ -z "$pick" ]]; then
    pick=$(sort -V <<<"$versions" | tail -n 1)
    [[ -n "$pick" ]] || { echo "install-browser: Debian's archive has no chromium" >&2; exit 1; }
    log "warning: no chromium $line.* in Debian's archive any more; installing $pick (set CHROMIUM_LINE)" >&2
  fi
  echo "$pick"
}

installed() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
current=$(installed chromium)
if [[ "$current" == "$line".* && "$(installed chromium-driver)" == "$current" ]]; then
  log "chromium and chromium-driver $current already installed"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-browser: installing chromium needs root (apt-get)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
version=$(pick_version)
log "installing chromium and chromium-driver $version"
apt-get install -y -qq --no-install-recommends "chromium=$version" "chromium-driver=$version" \
  "chromium-common=$version" >/dev/null
log "ok: $(chromium --version 2>/dev/null), $(chromedriver --version 2>/dev/null | head -1)"
