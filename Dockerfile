# syntax=docker/dockerfile:1
# Two images, laid out like upstream's: the base image (target `base`, as
# quay.io/operator-framework/ansible-operator: the operator at /usr/local/bin/ansible-operator,
# Ansible in a venv, HOME=/opt/ansible, user 1001) and the sample image (the default target: this
# repository's operators, watches.yaml, roles/ and playbooks/, on the base image).
#   docker build --target base -t ansible-operator-base:dev .
#   docker build -t ansible-operator:dev .
# The cache mounts need BuildKit (the default builder of current Docker, also supported by Buildah).
#
# The build arguments only say where the inputs come from; the images (4. and 5.) are the same in
# every build. `make docker-build` builds this file with podman where no registry is reachable:
# base images made with debootstrap from Debian's archive (RUST_IMAGE is then unused,
# PYTHON_IMAGE is Debian bookworm's python3, or trixie's Python 3.13 with BASE_SUITE=trixie) and
# BINARIES=prebuilt, the operator and etcd built on the host (hack/images.sh).

ARG RUST_VERSION=1.95
ARG GO_VERSION=1.26
ARG PYTHON_VERSION=3.11
ARG RUST_IMAGE=rust:${RUST_VERSION}-bookworm
ARG GO_IMAGE=golang:${GO_VERSION}-bookworm
ARG PYTHON_IMAGE=python:${PYTHON_VERSION}-slim-bookworm
# Where the operator and etcd binaries come from: `source` builds them in stages 1 and 2;
# `prebuilt` takes them from .local/image/ in the build context (ansible-operator, etcdctl, etcdutl,
# etcd-releases/v<version>/), built by the same commands on a bookworm host.
ARG BINARIES=source

# 1. The operator binary.
FROM ${RUST_IMAGE} AS operator
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin ansible-operator \
 && install -D -m 0755 target/release/ansible-operator /out/ansible-operator

# 2. etcd, etcdctl and etcdutl from the release pinned in hack/kube/go.mod: etcdctl and etcdutl for
# playbooks/etcdbackup.yml, all three as the release playbooks/etcdcluster.yml installs on hosts
# (/opt/etcd-releases/v<version>/; etcdutl for playbooks/etcdrestore.yml).
FROM ${GO_IMAGE} AS etcdctl
WORKDIR /src/hack/kube
COPY hack/kube/ ./
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' go.mod) \
 && mkdir -p "/out/etcd-releases/$version" \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "/out/etcd-releases/$version/etcdctl" go.etcd.io/etcd/etcdctl/v3 \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "/out/etcd-releases/$version/etcd" go.etcd.io/etcd/server/v3 \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "/out/etcd-releases/$version/etcdutl" go.etcd.io/etcd/etcdutl/v3 \
 && cp "/out/etcd-releases/$version/etcdctl" /out/etcdctl \
 && cp "/out/etcd-releases/$version/etcdutl" /out/etcdutl

# The binaries the images copy, from one of the two sources (BINARIES). A builder that
# skips unused stages (BuildKit, Buildah) runs only the chosen one.
FROM scratch AS binaries-source
COPY --from=operator /out/ansible-operator /out/ansible-operator
COPY --from=etcdctl /out/ /out/

FROM scratch AS binaries-prebuilt
COPY .local/image/ /out/

FROM binaries-${BINARIES} AS binaries

# 3. The Ansible venv of one toolchain (hack/toolchains/<ANSIBLE_TOOLCHAIN>/, as hack/install-ansible.sh
# installs it): its pins without pytest and the packages only pytest needs (iniconfig, pluggy,
# Pygments), kubernetes.core and community.crypto from the checksum-pinned `ansible` wheel its `bundle`
# file names, and our operator_sdk.util collection. 2.18 (default) is upstream's base image; 2.19 and
# 2.21 are newer lines (2.21 needs Python 3.12 or later: PYTHON_VERSION=3.13 and a trixie image):
#   docker build --build-arg ANSIBLE_TOOLCHAIN=2.19 -t ansible-operator:dev-2.19 .
#   docker build --build-arg PYTHON_VERSION=3.13 --build-arg PYTHON_IMAGE=python:3.13-slim-trixie \
#     --build-arg ANSIBLE_TOOLCHAIN=2.21 -t ansible-operator:dev-2.21 .
FROM ${PYTHON_IMAGE} AS ansible
ARG PYTHON_VERSION
ARG ANSIBLE_TOOLCHAIN=2.18
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY hack/toolchains/${ANSIBLE_TOOLCHAIN}/ /tmp/toolchain/
RUN . /tmp/toolchain/bundle \
 && python -m venv /opt/venv \
 && grep -viE '^(pytest|iniconfig|pluggy|pygments)==' /tmp/toolchain/requirements.txt > /tmp/requirements.txt \
 && /opt/venv/bin/pip install -r /tmp/requirements.txt \
 && echo "ansible==${ANSIBLE_BUNDLE_VERSION} --hash=sha256:${ANSIBLE_BUNDLE_SHA256}" > /tmp/bundle.txt \
 && /opt/venv/bin/pip download --no-deps --require-hashes -r /tmp/bundle.txt -d /tmp/bundle \
 && /opt/venv/bin/python -c 'import sys, zipfile; \
z = zipfile.ZipFile(sys.argv[1]); \
prefixes = ("ansible_collections/kubernetes/core/", "ansible_collections/community/crypto/"); \
members = [m for m in z.namelist() if m.startswith(prefixes)]; \
found = {p for p in prefixes if any(m.startswith(p) for m in members)}; \
sys.exit("missing in " + sys.argv[1] + ": " + str(set(prefixes) - found)) if found != set(prefixes) else z.extractall(sys.argv[2], members)' \
    "/tmp/bundle/ansible-${ANSIBLE_BUNDLE_VERSION}-py3-none-any.whl" \
    "/opt/venv/lib/python${PYTHON_VERSION}/site-packages" \
 && echo "${ANSIBLE_TOOLCHAIN}" > /opt/venv/.toolchain \
 && rm -rf /tmp/bundle /tmp/bundle.txt /tmp/requirements.txt /tmp/toolchain
COPY worker/ansible_operator_worker /opt/venv/lib/python${PYTHON_VERSION}/site-packages/ansible_operator_worker
COPY collections/ansible_collections/operator_sdk/util \
     /opt/venv/lib/python${PYTHON_VERSION}/site-packages/ansible_collections/operator_sdk/util
# Bytecode for every file a run imports (plugins, module_utils, the worker): the operator's user
# cannot write it into /opt/venv, and a run would compile what it imports each time.
RUN /opt/venv/bin/python -m compileall -q -j 0 /opt/venv/lib/python${PYTHON_VERSION}/site-packages > /dev/null \
 && /opt/venv/bin/python -c 'import ansible_operator_worker.zygote' \
 && /opt/venv/bin/ansible-doc kubernetes.core.k8s > /dev/null \
 && /opt/venv/bin/ansible-doc community.crypto.x509_certificate > /dev/null \
 && /opt/venv/bin/ansible-doc operator_sdk.util.k8s_status > /dev/null \
 && rm -rf /root/.ansible

# 4. The base image, laid out as upstream's (quay.io/operator-framework/ansible-operator), so that
# an upstream project's Dockerfile builds FROM it unchanged: tini at /tini (and /usr/bin/tini), the
# operator at /usr/local/bin/ansible-operator, Ansible with kubernetes.core and operator_sdk.util,
# HOME=/opt/ansible writable by user 1001 in group 0, the same ENTRYPOINT; curl, which the
# scaffold's molecule tests run in the manager's container to read its metrics. No operator inside: a
# project adds its watches.yaml, roles/ and playbooks/ (and collections with ansible-galaxy, into
# ~/.ansible, which Ansible searches before ours).
#   docker build --target base -t ansible-operator-base:dev .
FROM ${PYTHON_IMAGE} AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini openssh-client curl \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s /usr/bin/tini /tini
# Upstream's base image: roles_path for playbooks that import roles, its library directory, a local
# default inventory, user 1001 in group 0 (so an arbitrary UID in group 0, as on OpenShift, can
# write HOME).
RUN mkdir -p /etc/ansible \
 && printf '[defaults]\nroles_path = /opt/ansible/roles\nlibrary = /usr/share/ansible/openshift\n' > /etc/ansible/ansible.cfg \
 && echo 'localhost ansible_connection=local' > /etc/ansible/hosts \
 && useradd --uid 1001 --gid 0 --home-dir /opt/ansible --no-create-home --shell /usr/sbin/nologin ansible \
 && mkdir -p /opt/ansible/.ansible/tmp \
 && chown -R 1001:0 /opt/ansible \
 && chmod -R ug+rwx /opt/ansible
COPY --from=binaries /out/ansible-operator /usr/local/bin/ansible-operator
COPY --from=ansible /opt/venv /opt/venv
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HOME=/opt/ansible \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8
WORKDIR /opt/ansible
USER 1001
ENTRYPOINT ["/tini", "--", "/usr/local/bin/ansible-operator", "run", "--watches-file=./watches.yaml"]

# 5. The sample image (the default target): this repository's operators on the base image, as a
# project's Dockerfile adds its own, plus the etcd binaries its EtcdBackup, EtcdCluster and
# EtcdRestore playbooks use.
FROM base AS sample
COPY --from=binaries /out/etcd-releases /opt/etcd-releases
COPY --from=binaries /out/etcdctl /usr/local/bin/etcdctl
COPY --from=binaries /out/etcdutl /usr/local/bin/etcdutl
COPY --chown=1001:0 watches.yaml ${HOME}/watches.yaml
COPY --chown=1001:0 roles/ ${HOME}/roles/
COPY --chown=1001:0 playbooks/ ${HOME}/playbooks/
