#!/usr/bin/env bash
# Builds upstream's ansible operator (operator-framework/ansible-operator-plugins, UPSTREAM_VERSION,
# default v1.42.3) from its source, and a venv for it: the benchmark's baseline (`make bench-upstream`).
#   UPSTREAM_SRC      a clone of ansible-operator-plugins (a work tree or a bare git dir); the tag is
#                     taken from it. Default: cloned from GitHub into the cache.
#   UPSTREAM_VERSION  the tag (default v1.42.3)
# Prints the two paths the bench takes: --baseline-binary and --baseline-venv.
# The venv is this project's ansible-core 2.18 toolchain (upstream's base image pins ansible-core
# ~=2.18.3 and ansible-runner ~=2.4.0 too) plus upstream's own ansible_runner_http event plugin,
# which its binary needs. Idempotent: what is built is kept under the cache.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
version="${UPSTREAM_VERSION:-v1.42.3}"
cache_dir="${XDG_CACHE_HOME:-${HOME}/.cache}/ansible-operator/upstream-${version}"
binary="${cache_dir}/ansible-operator"
venv="${cache_dir}/venv"
src="${cache_dir}/src"

log() { printf '[install-upstream] %s\n' "$*" >&2; }

if [[ ! -d "${src}/cmd/ansible-operator" ]]; then
  rm -rf "${src}" && mkdir -p "${src}"
  if [[ -n "${UPSTREAM_SRC:-}" ]]; then
    log "extracting ${version} from ${UPSTREAM_SRC}"
    git -C "${UPSTREAM_SRC}" archive "${version}" | tar -x -C "${src}"
  else
    log "cloning ansible-operator-plugins ${version} from GitHub"
    git clone --quiet --depth 1 --branch "${version}" \
      https://github.com/operator-framework/ansible-operator-plugins "${src}"
  fi
fi

if [[ ! -x "${binary}" ]]; then
  log "building ${binary} (go build, a few minutes the first time)"
  (cd "${src}" && go build -o "${binary}" \
    -ldflags "-X github.com/operator-framework/ansible-operator-plugins/internal/version.Version=${version}" \
    ./cmd/ansible-operator)
fi

if [[ ! -f "${venv}/.upstream-${version}" ]]; then
  ANSIBLE_TOOLCHAIN=2.18 ANSIBLE_VENV="${venv}" "${repo}/hack/install-ansible.sh"
  log "installing upstream's ansible_runner_http event plugin"
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check \
    "${src}/images/ansible-operator/ansible_runner_http/"
  touch "${venv}/.upstream-${version}"
fi

"${binary}" version >&2
echo "--baseline-binary ${binary} --baseline-venv ${venv}"
