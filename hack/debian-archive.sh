#!/usr/bin/env bash
# Prints the URI of Debian's archive (`main`, the default) or of its security archive (`security`)
# as this machine's apt reaches them (deb822 sources, else a classic sources.list), so that the
# scripts that fetch from Debian (hack/images.sh, hack/install-python.sh) name no host of their own.
set -euo pipefail

want=${1:-main}
[[ $want == main || $want == security ]] || { echo "usage: $0 [main|security]" >&2; exit 2; }
security=$([[ $want == security ]] && echo 1 || echo 0)
uri=""
if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
  uri=$(awk -v want="$security" '/^URIs:/ && ($2 ~ /security/) == want { print $2; exit }' \
    /etc/apt/sources.list.d/debian.sources)
fi
if [[ -z $uri && -f /etc/apt/sources.list ]]; then
  uri=$(awk -v want="$security" '$1 == "deb" { u = ($2 ~ /^\[/ ? $3 : $2); if ((u ~ /security/) == want) { print u; exit } }' \
    /etc/apt/sources.list)
fi
[[ -n $uri ]] || { echo "debian-archive: no Debian $want archive in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list" >&2; exit 1; }
echo "$uri"
