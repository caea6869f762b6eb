#!/usr/bin/env bash
# Installs the Ansible toolchain the operator runs playbooks with into a venv (default <repo>/.venv):
# pinned ansible-core, ansible-runner, the kubernetes client and pytest (hack/toolchains/<T>/requirements.txt),
# the kubernetes.core and community.crypto collections (extracted from the `ansible` community wheel
# named in hack/toolchains/<T>/bundle, since Galaxy may be unreachable) and the repository's own
# operator_sdk.util collection (symlinked, so edits apply at once), and the warm executor's worker
# package (worker/, put on the venv's import path).
#   ANSIBLE_TOOLCHAIN  2.18 (default: upstream's base image), 2.19, or 2.21 (the newest line; it needs
#                      Python 3.12 or later: PYTHON=.local/bin/python3.13 from hack/install-python.sh)
#   ANSIBLE_VENV       where to install (default <repo>/.venv); a venv of another toolchain is rebuilt
#   PYTHON             the interpreter the venv is made with (default python3)
# Idempotent: the pip step is skipped when the requirements file is unchanged, the wheel is cached.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
toolchain="${ANSIBLE_TOOLCHAIN:-2.18}"
toolchain_dir="${repo}/hack/toolchains/${toolchain}"
venv="${ANSIBLE_VENV:-${repo}/.venv}"
requirements="${toolchain_dir}/requirements.txt"
own_collection="${repo}/collections/ansible_collections/operator_sdk/util"
cache_dir="${XDG_CACHE_HOME:-${HOME}/.cache}/ansible-operator"
python="${PYTHON:-python3}"

log() { printf '[install-ansible] %s\n' "$*" >&2; }

if [[ ! -f "${requirements}" || ! -f "${toolchain_dir}/bundle" ]]; then
  log "error: ANSIBLE_TOOLCHAIN=${toolchain} is not one of: $(ls "${repo}/hack/toolchains" | tr '\n' ' ')"
  exit 1
fi
# A toolchain that needs a newer Python than the machine's names it in min-python: without PYTHON,
# the one hack/install-python.sh builds is taken; an older one stops here with what to do.
if [[ -f "${toolchain_dir}/min-python" ]]; then
  min_python="$(cat "${toolchain_dir}/min-python")"
  if [[ -z "${PYTHON:-}" && -x "${repo}/.local/bin/python3.13" ]]; then
    python="${repo}/.local/bin/python3.13"
  fi
  if ! "${python}" -c "import sys; sys.exit(sys.version_info < tuple(map(int, '${min_python}'.split('.'))))"; then
    log "error: toolchain ${toolchain} needs Python ${min_python} or later; ${python} is $("${python}" --version 2>&1)."
    log "       Build Python 3.13 with hack/install-python.sh (once, cached), then run this again."
    exit 1
  fi
fi
# ANSIBLE_BUNDLE_VERSION and ANSIBLE_BUNDLE_SHA256.
# shellcheck source=/dev/null
source "${toolchain_dir}/bundle"

# 1. venv with the pinned Python packages; a venv of another toolchain is rebuilt from scratch.
if [[ -x "${venv}/bin/python" && "$(cat "${venv}/.toolchain" 2>/dev/null || true)" != "${toolchain}" ]]; then
  log "rebuilding ${venv}: it holds toolchain '$(cat "${venv}/.toolchain" 2>/dev/null || echo unknown)', ${toolchain} was asked for"
  rm -rf "${venv}"
fi
req_sha="$(sha256sum "${requirements}" | cut -d' ' -f1)"
stamp="${venv}/.installed-${req_sha}"
if [[ -f "${stamp}" ]]; then
  log "python packages of toolchain ${toolchain} up to date (${stamp})"
else
  if [[ ! -x "${venv}/bin/python" ]]; then
    log "creating venv ${venv} with $("${python}" --version 2>&1)"
    "${python}" -m venv "${venv}"
  fi
  log "installing pinned packages from ${requirements#"${repo}/"}"
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check -r "${requirements}"
  rm -f "${venv}"/.installed-*
  echo "${toolchain}" > "${venv}/.toolchain"
  touch "${stamp}"
fi

site_packages="$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
collections_dir="${site_packages}/ansible_collections"
mkdir -p "${collections_dir}"

# 2. kubernetes.core and community.crypto (the samples' certificates) from the ansible community
# wheel (cached outside the repo).
wheel="${cache_dir}/ansible-${ANSIBLE_BUNDLE_VERSION}-py3-none-any.whl"
if [[ -f "${wheel}" ]]; then
  log "using cached ${wheel}"
else
  log "downloading ansible==${ANSIBLE_BUNDLE_VERSION} wheel (~54 MB) into ${cache_dir}"
  mkdir -p "${cache_dir}"
  tmp_dl="$(mktemp -d "${cache_dir}/download.XXXXXX")"
  trap 'rm -rf "${tmp_dl}"' EXIT
  "${venv}/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
    --dest "${tmp_dl}" "ansible==${ANSIBLE_BUNDLE_VERSION}"
  got_sha="$(sha256sum "${tmp_dl}/$(basename "${wheel}")" | cut -d' ' -f1)"
  if [[ "${got_sha}" != "${ANSIBLE_BUNDLE_SHA256}" ]]; then
    log "error: sha256 of the downloaded wheel is ${got_sha}, expected ${ANSIBLE_BUNDLE_SHA256}"
    exit 1
  fi
  mv "${tmp_dl}/$(basename "${wheel}")" "${wheel}"
  rm -rf "${tmp_dl}"
  trap - EXIT
fi

for collection in kubernetes/core community/crypto; do
  marker="${collections_dir}/${collection}/.from-ansible-${ANSIBLE_BUNDLE_VERSION}"
  if [[ -f "${marker}" ]]; then
    log "${collection/\//.} already extracted"
    continue
  fi
  log "extracting ${collection/\//.} from ansible ${ANSIBLE_BUNDLE_VERSION} into ${collections_dir}"
  rm -rf "${collections_dir:?}/${collection}"
  "${venv}/bin/python" - "${wheel}" "${site_packages}" "${collection}" <<'PY'
import sys
import zipfile

wheel, dest, collection = sys.argv[1], sys.argv[2], sys.argv[3]
prefix = f"ansible_collections/{collection}/"
with zipfile.ZipFile(wheel) as zf:
    members = [m for m in zf.namelist() if m.startswith(prefix)]
    if not members:
        sys.exit(f"{wheel} holds no {prefix}")
    zf.extractall(dest, members)
PY
  touch "${marker}"
done

# Their bytecode, written now: a run imports their plugins (the k8s action plugin alone is some
# 2.5 ms to compile), and a run cannot cache what it compiles where PYTHONDONTWRITEBYTECODE is set
# or the venv is not its own to write (the image's user). Files already compiled are skipped.
"${venv}/bin/python" -m compileall -q -j 0 "${collections_dir}/kubernetes/core" "${collections_dir}/community/crypto" >/dev/null

# 3. The project's own operator_sdk.util collection, live from the repository.
if [[ ! -d "${own_collection}" ]]; then
  log "error: ${own_collection} does not exist"
  exit 1
fi
mkdir -p "${collections_dir}/operator_sdk"
link="${collections_dir}/operator_sdk/util"
if [[ "$(readlink "${link}" 2>/dev/null || true)" == "${own_collection}" ]]; then
  log "operator_sdk.util already linked to ${own_collection#"${repo}/"}"
else
  log "linking operator_sdk.util -> ${own_collection}"
  # ln -sfn would create the link inside a real directory left by an earlier install.
  if [[ -d "${link}" && ! -L "${link}" ]]; then
    rm -rf "${link}"
  fi
  ln -sfn "${own_collection}" "${link}"
fi

# 4. The warm executor's worker package (worker/ansible_operator_worker), live from the repository.
worker_pth="${site_packages}/ansible_operator_worker.pth"
if [[ "$(cat "${worker_pth}" 2>/dev/null || true)" != "${repo}/worker" ]]; then
  log "adding ${repo}/worker to the venv's import path (the warm executor's worker)"
  echo "${repo}/worker" > "${worker_pth}"
fi

# 5. Verify that the pieces are usable.
log "verifying"
"${venv}/bin/ansible-doc" kubernetes.core.k8s >/dev/null
"${venv}/bin/ansible-doc" community.crypto.x509_certificate >/dev/null
"${venv}/bin/ansible-doc" operator_sdk.util.k8s_status >/dev/null
"${venv}/bin/python" -c 'import ansible_operator_worker.zygote'
runner_version="$("${venv}/bin/ansible-runner" --version)"
core_version="$("${venv}/bin/python" -c 'import ansible.release as r; print(r.__version__)')"
log "ok: toolchain ${toolchain}: ansible-core ${core_version}, ansible-runner ${runner_version}, kubernetes.core, community.crypto and operator_sdk.util in ${collections_dir}"
