# syntax=docker/dockerfile:1
# The sample operator's image, laid out like upstream's (quay.io/operator-framework/ansible-operator
# plus a project's Dockerfile): the operator at /usr/local/bin/ansible-operator, Ansible in a venv,
# the project (watches.yaml, roles/, playbooks/) in HOME=/opt/ansible, running as user 1001.
#   docker build -t ansible-operator:dev .
# The cache mounts need BuildKit (the default builder of current Docker, also supported by Buildah).

ARG RUST_VERSION=1.95
ARG GO_VERSION=1.26
ARG PYTHON_VERSION=3.11

# 1. The operator binary.
FROM rust:${RUST_VERSION}-bookworm AS operator
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin ansible-operator \
 && install -D -m 0755 target/release/ansible-operator /out/ansible-operator

# 2. etcd and etcdctl from the release pinned in hack/kube/go.mod: etcdctl for
# playbooks/etcdbackup.yml, both as the release playbooks/etcdcluster.yml installs on hosts
# (/opt/etcd-releases/v<version>/).
FROM golang:${GO_VERSION}-bookworm AS etcdctl
WORKDIR /src/hack/kube
COPY hack/kube/ ./
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' go.mod) \
 && mkdir -p "/out/etcd-releases/$version" \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "/out/etcd-releases/$version/etcdctl" go.etcd.io/etcd/etcdctl/v3 \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "/out/etcd-releases/$version/etcd" go.etcd.io/etcd/server/v3 \
 && cp "/out/etcd-releases/$version/etcdctl" /out/etcdctl

# 3. The Ansible venv: the pins of hack/requirements-ansible.txt without pytest and the packages
# only pytest needs (iniconfig, pluggy, Pygments), kubernetes.core from the checksum-pinned
# `ansible` wheel (as hack/install-ansible.sh does), and our operator_sdk.util collection.
FROM python:${PYTHON_VERSION}-slim-bookworm AS ansible
ARG PYTHON_VERSION
ARG ANSIBLE_BUNDLE_VERSION=12.3.0
ARG ANSIBLE_BUNDLE_SHA256=cd156f82fa87f7a899212b0efa9f7ca3a24d609212de9f78428a572eb01e5414
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY hack/requirements-ansible.txt /tmp/requirements-ansible.txt
RUN python -m venv /opt/venv \
 && grep -viE '^(pytest|iniconfig|pluggy|pygments)==' /tmp/requirements-ansible.txt > /tmp/requirements.txt \
 && /opt/venv/bin/pip install -r /tmp/requirements.txt \
 && echo "ansible==${ANSIBLE_BUNDLE_VERSION} --hash=sha256:${ANSIBLE_BUNDLE_SHA256}" > /tmp/bundle.txt \
 && /opt/venv/bin/pip download --no-deps --require-hashes -r /tmp/bundle.txt -d /tmp/bundle \
 && /opt/venv/bin/python -c 'import sys, zipfile; \
z = zipfile.ZipFile(sys.argv[1]); \
members = [m for m in z.namelist() if m.startswith("ansible_collections/kubernetes/core/")]; \
sys.exit("no kubernetes.core in " + sys.argv[1]) if not members else z.extractall(sys.argv[2], members)' \
    "/tmp/bundle/ansible-${ANSIBLE_BUNDLE_VERSION}-py3-none-any.whl" \
    "/opt/venv/lib/python${PYTHON_VERSION}/site-packages" \
 && rm -rf /tmp/bundle /tmp/bundle.txt /tmp/requirements.txt /tmp/requirements-ansible.txt
COPY collections/ansible_collections/operator_sdk/util \
     /opt/venv/lib/python${PYTHON_VERSION}/site-packages/ansible_collections/operator_sdk/util
RUN /opt/venv/bin/ansible-doc kubernetes.core.k8s > /dev/null \
 && /opt/venv/bin/ansible-doc operator_sdk.util.k8s_status > /dev/null \
 && rm -rf /root/.ansible

# 4. The runtime image.
FROM python:${PYTHON_VERSION}-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini openssh-client \
 && rm -rf /var/lib/apt/lists/*
# Upstream's base image: roles_path for playbooks that import roles, a local default inventory,
# user 1001 in group 0 (so an arbitrary UID in group 0, as on OpenShift, can write HOME).
RUN mkdir -p /etc/ansible \
 && printf '[defaults]\nroles_path = /opt/ansible/roles\n' > /etc/ansible/ansible.cfg \
 && echo 'localhost ansible_connection=local' > /etc/ansible/hosts \
 && useradd --uid 1001 --gid 0 --home-dir /opt/ansible --no-create-home --shell /usr/sbin/nologin ansible \
 && mkdir -p /opt/ansible/.ansible/tmp \
 && chown -R 1001:0 /opt/ansible \
 && chmod -R ug+rwx /opt/ansible
COPY --from=operator /out/ansible-operator /usr/local/bin/ansible-operator
COPY --from=etcdctl /out/etcd-releases /opt/etcd-releases
COPY --from=etcdctl /out/etcdctl /usr/local/bin/etcdctl
COPY --from=ansible /opt/venv /opt/venv
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HOME=/opt/ansible \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8
WORKDIR /opt/ansible
COPY --chown=1001:0 watches.yaml ./watches.yaml
COPY --chown=1001:0 roles/ ./roles/
COPY --chown=1001:0 playbooks/ ./playbooks/
USER 1001
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/ansible-operator", "run", "--watches-file=./watches.yaml"]
