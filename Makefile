# Developer entry points. `make test` and `make run` work on a fresh machine: they install what is
# missing (hack/install-*.sh), start the local control plane, and stop it again where they started it.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

REPO := $(CURDIR)
LOCAL_KUBECONFIG := $(REPO)/.local/cluster/kubeconfig
export PATH := $(REPO)/.venv/bin:$(REPO)/.local/bin:$(HOME)/.cargo/bin:$(PATH)
export VIRTUAL_ENV := $(REPO)/.venv
# Where the EtcdCluster sample finds the etcd release it installs on hosts (hack/install-kube.sh).
export ETCD_RELEASES_DIR ?= $(REPO)/.local/etcd-releases
WATCHES ?= $(REPO)/watches.yaml
# One build cache for every clone on this machine: a fresh clone (CI) rebuilds only this crate.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/ansible-operator/cargo-target

.PHONY: help install install-kube install-ansible install-ssh cluster-up cluster-down cluster-status \
	test-hosts-up test-hosts-down build lint test test-rust test-collection run bench

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

install: install-kube install-ansible install-ssh ## Install the control plane, the Ansible venv and sshd

install-kube: ## Build (once, cached) and link kube-apiserver, kube-controller-manager, kubectl, etcd
	hack/install-kube.sh
	hack/install-etcd-releases.sh

install-ansible: ## Create .venv with pinned Ansible, ansible-runner and the collections
	hack/install-ansible.sh

install-ssh: ## Install the pinned openssh-server for the SSH test hosts (needs root)
	hack/test-hosts.sh install

cluster-up: install-kube ## Start the local control plane on 127.0.0.1
	hack/local-cluster.sh up

cluster-down: ## Stop the local control plane
	hack/local-cluster.sh down

cluster-status: ## Show what of the local control plane runs
	hack/local-cluster.sh status

test-hosts-up: install-ssh ## Start the SSH test hosts (sshd on 127.0.0.11-14:2222)
	hack/test-hosts.sh up

test-hosts-down: ## Stop the SSH test hosts and wipe their home directories
	hack/test-hosts.sh down

build: ## Build the operator
	cargo build --bin ansible-operator
	mkdir -p $(REPO)/.local/bin && ln -sfn $(CARGO_TARGET_DIR)/debug/ansible-operator $(REPO)/.local/bin/ansible-operator

lint: ## rustfmt and clippy, warnings are errors
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

test: install lint ## Everything: unit and integration tests against the real control plane and sshd hosts
	hack/local-cluster.sh up
	hack/test-hosts.sh up
	status=0; \
	trap 'hack/test-hosts.sh down; hack/local-cluster.sh down' EXIT; \
	$(MAKE) --no-print-directory test-rust KUBECONFIG=$(LOCAL_KUBECONFIG) || status=$$?; \
	$(MAKE) --no-print-directory test-collection KUBECONFIG=$(LOCAL_KUBECONFIG) || status=$$?; \
	exit $$status

test-rust: ## Rust unit and integration tests (uses KUBECONFIG, or starts the local cluster)
	cargo test --all-targets --no-fail-fast

test-collection: ## The operator_sdk.util collection's tests (needs KUBECONFIG)
	.venv/bin/python -m pytest tests/collection -q

run: install build ## Run the operator on watches.yaml against the local control plane (and SSH test hosts)
	hack/local-cluster.sh up
	hack/test-hosts.sh up
	KUBECONFIG=$(LOCAL_KUBECONFIG) kubectl apply -f deploy/crds/
	KUBECONFIG=$(LOCAL_KUBECONFIG) kubectl create secret generic etcd-hosts-ssh -n default \
		--type=kubernetes.io/ssh-auth --from-file=ssh-privatekey=.local/test-hosts/id_ed25519 \
		--from-file=known_hosts=.local/test-hosts/known_hosts --dry-run=client -o yaml \
		| KUBECONFIG=$(LOCAL_KUBECONFIG) kubectl apply -f -
	KUBECONFIG=$(LOCAL_KUBECONFIG) ansible-operator run --watches-file=$(WATCHES)

bench: install ## Benchmark on the local control plane (bench/README.md); e.g. BENCH_ARGS="--burst 300"
	hack/local-cluster.sh up
	cd bench && KUBECONFIG=$(LOCAL_KUBECONFIG) CARGO_TARGET_DIR=$(REPO)/bench/target cargo run --release -- $(BENCH_ARGS)
