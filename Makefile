# Developer entry points. `make test` and `make run` work on a fresh machine: they install what is
# missing (hack/install-*.sh), start the local control plane, and stop it again where they started it.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

REPO := $(CURDIR)
LOCAL_KUBECONFIG := $(REPO)/.local/cluster/kubeconfig
comma := ,
export PATH := $(REPO)/.venv/bin:$(REPO)/.local/bin:$(HOME)/.cargo/bin:$(PATH)
export VIRTUAL_ENV := $(REPO)/.venv
# Where the EtcdCluster sample finds the etcd release it installs on hosts (hack/install-kube.sh).
export ETCD_RELEASES_DIR ?= $(REPO)/.local/etcd-releases
export KUBE_RELEASES_DIR ?= $(REPO)/.local/kube-releases
WATCHES ?= $(REPO)/watches.yaml
# The newest Ansible toolchain (hack/toolchains/2.21, on the Python 3.13 that hack/install-python.sh
# builds), tested by a slice of the suite in `make test`; the 2.19 line's venv, by the Python tests.
VENV_NEXT := $(REPO)/.venv-2.21
VENV_2_19 := $(REPO)/.venv-2.19
# One build cache for every clone on this machine: a fresh clone (CI) rebuilds only this crate, and
# so does a clone building after another one (hack/cargo-target.sh).
export CARGO_TARGET_DIR ?= $(HOME)/.cache/ansible-operator/cargo-target
# The local cluster's node (containerd, kubelet, scheduler; hack/local-cluster.sh). NODE=0 runs the
# control plane alone: no Pod ever runs, so the tests that need one are left out.
export NODE ?= 1
# The sample operator's image, named as in upstream's project scaffold: `make docker-build deploy IMG=...`.
IMG ?= ansible-operator:dev
# The base image an upstream project builds FROM (as quay.io/operator-framework/ansible-operator).
BASE_IMG ?= localhost/ansible-operator-base:dev
# kubectl's cluster for deploy/undeploy: KUBECONFIG when set, else the local cluster.
DEPLOY_KUBECONFIG := $(or $(KUBECONFIG),$(LOCAL_KUBECONFIG))
# Tests that need a running Pod: whole modules of the test suite (tests/*.rs), and single tests of others.
export NODE_TEST_MODULES := in_cluster newest_toolchain_image node pod_modules scaffold
export NODE_TEST_SKIPS := --skip memcached_role --skip the_samples_scenarios --skip its_manager_deployed_from_an_image --skip samples_reconcile_and_finalize_with_only_the_service_accounts_permissions
ifeq ($(NODE),0)
TEST_FILTERS := -- $(NODE_TEST_SKIPS) $(foreach t,$(NODE_TEST_MODULES),--skip $(t)::)
INSTALL_NODE :=
else
TEST_FILTERS :=
INSTALL_NODE := install-node
endif

.PHONY: help install install-kube install-ansible install-ansible-next install-ssh install-node install-browser cluster-up \
	cluster-down cluster-status test-hosts-up test-hosts-down build lint test test-rust test-python test-scenarios run bench bench-upstream \
	docker-build-base docker-build docker-push deploy undeploy rbac

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

install: install-kube install-ansible install-ssh $(INSTALL_NODE) ## Install the cluster, the Ansible venv, sshd and (NODE=1) the node's packages

install-kube: ## Build (once, cached) and link kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd
	hack/install-kube.sh
	hack/install-etcd-releases.sh

install-ansible: ## Create .venv with the default toolchain (ANSIBLE_TOOLCHAIN=2.18: upstream's base image)
	hack/install-ansible.sh

install-ansible-next: ## Build Python 3.13 (once, cached) and create .venv-2.21 with the newest toolchain (ansible-core 2.21), and .venv-2.19 (ansible-core 2.19)
	hack/install-python.sh
	ANSIBLE_TOOLCHAIN=2.21 ANSIBLE_VENV=$(VENV_NEXT) PYTHON=$(REPO)/.local/bin/python3.13 hack/install-ansible.sh
	ANSIBLE_TOOLCHAIN=2.19 ANSIBLE_VENV=$(VENV_2_19) hack/install-ansible.sh

install-ssh: ## Install the pinned openssh-server for the SSH test hosts (needs root)
	hack/test-hosts.sh install

install-jaeger: ## Build (once, cached) and link the pinned Jaeger v2 backend the traces test sends to
	hack/install-jaeger.sh

install-browser: ## Install the pinned headless Chromium and chromedriver the console's test drives (root)
	hack/install-browser.sh

install-node: ## Install the node's Debian packages, pinned: containerd, runc, CNI plugins, podman, debootstrap, socat (root)
	hack/install-node.sh

cluster-up: install-kube $(INSTALL_NODE) ## Start the local cluster: control plane on 127.0.0.1 and (NODE=1) the node
	hack/local-cluster.sh up

cluster-down: ## Stop the local cluster, its Pods included
	hack/local-cluster.sh down

cluster-status: ## Show what of the local control plane runs
	hack/local-cluster.sh status

test-hosts-up: install-ssh ## Start the SSH test hosts (sshd on 127.0.0.11-14:2222)
	hack/test-hosts.sh up

test-hosts-down: ## Stop the SSH test hosts and wipe their home directories
	hack/test-hosts.sh down

build: ## Build the operator
	hack/cargo-target.sh
	cargo build --bin ansible-operator
	mkdir -p $(REPO)/.local/bin && ln -sfn $(CARGO_TARGET_DIR)/debug/ansible-operator $(REPO)/.local/bin/ansible-operator

rbac: build ## Render deploy/rbac from watches.yaml's permissions (ansible-operator rbac); a test fails when they differ
	$(CARGO_TARGET_DIR)/debug/ansible-operator rbac --watches-file=watches.yaml --crds=deploy/crds --output-dir=deploy/rbac

docker-build-base: ## Build the base image BASE_IMG (what an upstream project builds FROM) with podman; BASE_SUITE=trixie builds it on Python 3.13 (for ANSIBLE_TOOLCHAIN=2.21)
	hack/images.sh operator-base $(BASE_IMG)

docker-build: docker-build-base ## Build the sample operator's image IMG, FROM the base image, with podman; load it into the local node when it runs
	hack/images.sh operator $(IMG)
	if [[ "$(NODE)" != 0 ]] && hack/local-cluster.sh status >/dev/null 2>&1; then hack/images.sh load $(IMG); fi

docker-push: ## Push the operator image IMG to its registry (podman push)
	hack/images.sh podman push $(IMG)

deploy: ## Install the CRDs, RBAC and the operator running IMG from deploy/ (kubectl apply -k), wait until it is ready
	KUBECONFIG=$(DEPLOY_KUBECONFIG) hack/deploy.sh apply $(IMG)

undeploy: ## Remove everything deploy installed (the CRDs, and so every CR, too)
	KUBECONFIG=$(DEPLOY_KUBECONFIG) hack/deploy.sh delete $(IMG)

lint: ## rustfmt and clippy, warnings are errors
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

test: install install-ansible-next install-browser install-jaeger lint ## Everything: unit, Python and integration tests (real control plane, its node, sshd hosts), warm executor, then a slice on the cold executor beside one on the newest toolchain (2.21, its Python 3.13 image too) and the KubernetesCluster test
	@status=0; \
	echo "make test: $$(date +%T): installed and linted; the cluster, its hosts, the image and the test lanes follow"; \
	mkdir -p target/test-lanes; \
	trap '{ hack/test-hosts.sh down; hack/local-cluster.sh down; } >target/test-lanes/teardown.log 2>&1; \
		echo "make test: $$(date +%T): stopped the cluster and its hosts (target/test-lanes/teardown.log)"' EXIT; \
	hack/local-cluster.sh up; \
	hack/test-hosts.sh up; \
	if [[ "$(NODE)" == 0 ]]; then \
		echo "make test: NODE=0: leaving out tests/{$(subst $(eval) ,$(comma),$(NODE_TEST_MODULES))}.rs and $(NODE_TEST_SKIPS): they need a running Pod"; \
	else \
		$(MAKE) --no-print-directory docker-build; \
	fi; \
	echo "make test: $$(date +%T): the cluster, its hosts and the image are ready"; \
	KUBECONFIG=$(LOCAL_KUBECONFIG) hack/test-lanes.sh warm || status=$$?; \
	KUBECONFIG=$(LOCAL_KUBECONFIG) hack/test-lanes.sh cold next warm-late || status=$$?; \
	if ((status)); then echo "make test: what failed, by pass:"; cat target/test-lanes/{warm,cold+next+warm-late}.failed 2>/dev/null || true; fi; \
	exit $$status

test-rust: ## Rust unit and integration tests, one after another (uses KUBECONFIG, or starts the local cluster)
	cargo test --all-targets --no-fail-fast $(TEST_FILTERS)

test-python: ## The operator_sdk.util collection's and the warm worker's Python tests (needs KUBECONFIG)
	.venv/bin/python -m pytest tests/collection worker/tests -q

run: install build ## Run the operator on watches.yaml against the local cluster (and SSH test hosts)
	hack/local-cluster.sh up
	hack/test-hosts.sh up
	KUBECONFIG=$(LOCAL_KUBECONFIG) kubectl apply -f deploy/crds/
	KUBECONFIG=$(LOCAL_KUBECONFIG) kubectl create secret generic etcd-hosts-ssh -n default \
		--type=kubernetes.io/ssh-auth --from-file=ssh-privatekey=.local/test-hosts/id_ed25519 \
		--from-file=known_hosts=.local/test-hosts/known_hosts --dry-run=client -o yaml \
		| KUBECONFIG=$(LOCAL_KUBECONFIG) kubectl annotate -f - --local -o yaml \
			ansible-operator.dev/allow-kinds=EtcdCluster,EtcdRestore,KubernetesCluster \
		| KUBECONFIG=$(LOCAL_KUBECONFIG) kubectl apply -f -
	KUBECONFIG=$(LOCAL_KUBECONFIG) ansible-operator run --watches-file=$(WATCHES)

test-scenarios: install build ## Run the samples' scenarios (tests/scenarios/) with `ansible-operator test` on the local cluster and SSH test hosts; SCENARIO_ARGS="--keep ..."
	hack/local-cluster.sh up
	hack/test-hosts.sh up
	ETCD_SSH_KEY="$$(cat .local/test-hosts/id_ed25519)" ETCD_KNOWN_HOSTS="$$(cat .local/test-hosts/known_hosts)" \
		KUBECONFIG=$(LOCAL_KUBECONFIG) ansible-operator test $(SCENARIO_ARGS)

bench: install ## Benchmark on the local control plane (bench/README.md); e.g. BENCH_ARGS="--burst 300"
	hack/local-cluster.sh up
	cd bench && KUBECONFIG=$(LOCAL_KUBECONFIG) CARGO_TARGET_DIR=$(REPO)/bench/target cargo run --release -- $(BENCH_ARGS)

bench-upstream: install ## make bench with upstream's v1.42.3 as baseline, built from source (hack/install-upstream.sh; UPSTREAM_SRC=a clone)
	$(MAKE) bench BENCH_ARGS="$$(hack/install-upstream.sh) $(BENCH_ARGS)"
