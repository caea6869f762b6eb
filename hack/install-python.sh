#!/usr/bin/env bash
# Builds (once, cached) the CPython that the newest Ansible toolchain needs: ansible-core 2.21 runs
# on Python 3.12 or later, and this machine's Debian 12 has 3.11. The source is Debian 13's
# python3.13 source package, fetched with apt from the archive this machine's apt already uses
# (its signed Sources index checks the files); the upstream tarball in it is built as it is, without
# Debian's patches (they move pip's wheels and the install layout into Debian's own places).
#   PYTHON_SOURCE_VERSION  the source package's version (default below)
# Prints nothing but its log on stderr; the interpreter is <cache>/python-<version>/bin/python3.13,
# linked as <repo>/.local/bin/python3.13. Needs root for apt (the build dependencies, when missing).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
version="${PYTHON_SOURCE_VERSION:-3.13.5-2+deb13u5}"
package=python3.13
suite=trixie
cache_dir="${XDG_CACHE_HOME:-${HOME}/.cache}/ansible-operator"
prefix="${cache_dir}/python-${version}"
link="${repo}/.local/bin/python3.13"
# What the build needs beyond a compiler, as this machine's Debian 12 ships them.
build_deps=(build-essential pkg-config libssl-dev libffi-dev zlib1g-dev libbz2-dev liblzma-dev
  libsqlite3-dev libreadline-dev libncurses-dev uuid-dev libexpat1-dev)

log() { printf '[install-python] %s\n' "$*" >&2; }

link_it() {
  mkdir -p "$(dirname "${link}")"
  ln -sfn "${prefix}/bin/python3.13" "${link}"
}

# Links and stops when ${prefix} holds a finished build.
link_if_built() {
  if [[ -x "${prefix}/bin/python3.13" && -f "${prefix}/.complete" ]]; then
    link_it
    log "python ${version} already built ($("${prefix}/bin/python3.13" --version))"
    exit 0
  fi
}

link_if_built

missing=()
for dep in "${build_deps[@]}"; do
  dpkg-query -W -f='${Status}' "${dep}" 2>/dev/null | grep -q "ok installed" || missing+=("${dep}")
done
if ((${#missing[@]})); then
  [[ $(id -u) -eq 0 ]] || { log "error: building Python needs ${missing[*]} (apt-get, as root)"; exit 1; }
  log "installing the build dependencies ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  }
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/install-python.XXXXXX")"
trap 'rm -rf "${work}"' EXIT

# A private apt state with one source line: the archive of the system's own apt sources, suite
# trixie. The system's apt lists and settings are left as they are.
uri="$("${repo}/hack/debian-archive.sh" main)"
mkdir -p "${work}/lists/partial" "${work}/cache/archives/partial" "${work}/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${uri} ${suite} main" >"${work}/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=${work}/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=${work}/lists"
  -o "Dir::Cache=${work}/cache" -o APT::Sandbox::User=root)
log "reading Debian ${suite}'s source index"
apt-get "${apt_opts[@]}" update -q >"${work}/apt.log" 2>&1 || { cat "${work}/apt.log" >&2; exit 1; }
if ! apt-cache "${apt_opts[@]}" showsrc "${package}" | grep -qx "Version: ${version}"; then
  newest="$(apt-cache "${apt_opts[@]}" showsrc "${package}" | awk '/^Version:/ { print $2 }' | sort -V | tail -n 1)"
  [[ -n "${newest}" ]] || { log "error: Debian ${suite} has no source package ${package}"; exit 1; }
  log "warning: Debian ${suite} no longer has ${package} ${version}; taking ${newest} (set PYTHON_SOURCE_VERSION)"
  version="${newest}"
  prefix="${cache_dir}/python-${version}"
  link_if_built
fi
log "fetching ${package} ${version}"
(cd "${work}/src" && apt-get "${apt_opts[@]}" source --download-only -q "${package}=${version}" >"${work}/apt.log" 2>&1) \
  || { cat "${work}/apt.log" >&2; exit 1; }
tarball=""
for candidate in "${work}/src/${package}_${version%%-*}".orig.tar.{xz,gz,bz2}; do
  [[ -f "${candidate}" ]] && tarball="${candidate}" && break
done
[[ -n "${tarball}" ]] || { log "error: the source package holds no upstream tarball"; exit 1; }
mkdir "${work}/build"
tar -xf "${tarball}" -C "${work}/build" --strip-components=1

log "building CPython ${version%%-*} into ${prefix} (some 3 minutes on 2 cores)"
rm -rf "${prefix}"
(
  cd "${work}/build"
  ./configure --prefix="${prefix}" --with-ensurepip=install >"${work}/configure.log" 2>&1 \
    || { tail -n 30 "${work}/configure.log" >&2; exit 1; }
  make -j"$(nproc)" -s >"${work}/make.log" 2>&1 || { tail -n 30 "${work}/make.log" >&2; exit 1; }
  make -s install >"${work}/install.log" 2>&1 || { tail -n 30 "${work}/install.log" >&2; exit 1; }
)
"${prefix}/bin/python3.13" -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, readline, venv' \
  || { log "error: the built Python lacks a module Ansible or the tests need"; exit 1; }
touch "${prefix}/.complete"
link_it
log "ok: $("${prefix}/bin/python3.13" --version) in ${prefix}"
