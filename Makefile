# Developer entry points. `make test` and `make run` work on a fresh machine: they install what is
# missing (hack/install-*.sh), start the local control plane, and stop it again where they started it.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

REPO := $(CURDIR)
LOCAL_KUBECONFIG := $(REPO)/.local/cluster/kubeconfig
export PATH := $(REPO)/.venv/bin:$(REPO)/.local/bin:$(HOME)/.cargo/bin:$(PATH)
export VIRTUAL_ENV := $(REPO)/.venv
WATCHES ?= $(REPO)/watches.yaml
# One build cache for every clone on this machine: a fresh clone (CI) rebuilds only this crate.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/ansible-operator/cargo-target

.PHONY: help install install-kube install-ansible cluster-up cluster-down cluster-status build lint \
	test test-rust test-collection run bench

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

install: install-kube install-ansible ## Install the control plane binaries and the Ansible venv

install-kube: ## Build (once, cached) and link kube-apiserver, kube-controller-manager, kubectl, etcd
	hack/install-kube.sh

install-ansible: ## Create .venv with pinned Ansible, ansible-runner and the collections
	hack/install-ansible.sh

cluster-up: install-kube ## Start the local control plane on 127.0.0.1
	hack/local-cluster.sh up

cluster-down: ## Stop the local control plane
	hack/local-cluster.sh down

cluster-status: ## Show what of the local control plane runs
	hack/local-cluster.sh status

build: ## Build the operator
	cargo build --bin ansible-operator
	mkdir -p $(REPO)/.local/bin && ln -sfn $(CARGO_TARGET_DIR)/debug/ansible-operator $(REPO)/.local/bin/ansible-operator

lint: ## rustfmt and clippy, warnings are errors
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

test: install lint ## Everything: unit and integration tests against the real control plane
	hack/local-cluster.sh up
	status=0; \
	trap 'hack/local-cluster.sh down' EXIT; \
	$(MAKE) --no-print-directory test-rust KUBECONFIG=$(LOCAL_KUBECONFIG) || status=$$?; \
	$(MAKE) --no-print-directory test-collection KUBECONFIG=$(LOCAL_KUBECONFIG) || status=$$?; \
	exit $$status

test-rust: ## Rust unit and integration tests (uses KUBECONFIG, or starts the local cluster)
	cargo test --all-targets --no-fail-fast

test-collection: ## The operator_sdk.util collection's tests (needs KUBECONFIG)
	.venv/bin/python -m pytest tests/collection -q

run: install build ## Run the operator on watches.yaml against the local control plane
	hack/local-cluster.sh up
	KUBECONFIG=$(LOCAL_KUBECONFIG) kubectl apply -f deploy/crds/
	KUBECONFIG=$(LOCAL_KUBECONFIG) ansible-operator run --watches-file=$(WATCHES)

bench: install ## Benchmark on the local control plane (bench/README.md); e.g. BENCH_ARGS="--burst 300"
	hack/local-cluster.sh up
	cd bench && KUBECONFIG=$(LOCAL_KUBECONFIG) CARGO_TARGET_DIR=$(REPO)/bench/target cargo run --release -- $(BENCH_ARGS)
