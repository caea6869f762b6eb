#!/usr/bin/env bash
# Runs the Rust test suite against the local control plane in parallel lanes: test binaries that
# share nothing run side by side (each integration test uses its own namespace); the ones that share
# the SSH test hosts run one after another in their own lane; a test that changes what every other
# test relies on (tests/in_cluster.rs: `make undeploy` deletes the sample CRDs) runs by itself after
# the lanes, as does the KubernetesCluster test (warm pass only). Builds the tests once first.
#
#   hack/test-lanes.sh warm   every test binary, operators on the warm executor (the default)
#   hack/test-lanes.sh cold   the same again with ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR=cold, except the
#                             tests of the executor itself (they choose their executors)
#   hack/test-lanes.sh next   the newer toolchain's slice (.venv-2.19): samples, SSH runs, finalizers,
#                             k8s_status, requeue_after, selectors, the executor, and the Python tests
#
# Logs: target/test-lanes/<pass>-<lane>.log; a failing lane's log is printed in full at the end.
# Needs KUBECONFIG (the Makefile's `test` target sets it and starts the cluster and hosts). With
# NODE=0 (a control plane without a node) the test binaries in NODE_TEST_BINARIES and the tests in
# NODE_TEST_SKIPS (`--skip name` ...) are left out: they need a running Pod (both set by the Makefile).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pass=${1:?usage: hack/test-lanes.sh warm|cold|next}
logs="$repo/target/test-lanes"
mkdir -p "$logs"
cd "$repo"

# Lanes: each line is one lane, run in order within the lane; lanes run at the same time. `alone`
# runs after every lane has ended.
alone=""
case "$pass" in
  warm)
    lanes=(
      "--lib --bins --test module_graph --test ssh --test security_inventory --test etcd_cluster --test etcd_restore"
      "--test operations --test deploy_manifests --test proxy --test ownership --test leader --test endpoints --test node --test pod_modules --test scaffold"
      "--test executor --test core --test extra_vars --test security_vars --test finalizers --test modes --test requeue --test samples --test status_and_filters --test toolchain --test watches_errors --test harness --test faults --test pause --test ready_conditions --test read_set --test admission"
      "--test history --test events --test api --test console --test storm --test startup_resync --test security_access --test replay --test secrets_masked --test plan"
      "python"
    )
    # After the lanes, by themselves: `make undeploy` deletes the sample CRDs, and with them every
    # CR of those kinds the other tests still use; sharding measures handovers against lease
    # durations, which the other lanes' load on two cores stretches past their bounds;
    # kubernetes_cluster runs three control planes on its SSH hosts (host5–host7): beside the lanes
    # it took 22 minutes and slowed them all, by itself it takes 6 or 7.
    alone="--test in_cluster --test sharding --test kubernetes_cluster"
    ;;
  cold)
    export ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR=cold
    lanes=(
      "--test ssh --test security_inventory --test etcd_cluster --test etcd_restore"
      "--test operations --test deploy_manifests --test proxy --test ownership --test leader --test endpoints --test pod_modules --test pause --test ready_conditions --test read_set"
      "--test core --test extra_vars --test security_vars --test finalizers --test modes --test requeue --test samples --test status_and_filters --test toolchain --test watches_errors --test history --test events --test api --test faults --test security_access --test replay --test secrets_masked --test plan"
    )
    ;;
  next)
    export ANSIBLE_OPERATOR_TEST_VENV="$repo/.venv-2.19"
    lanes=(
      "--test ssh --test security_inventory --test samples --test pod_modules"
      "--test finalizers --test status_and_filters --test requeue --test executor"
      "--test toolchain version_reports"
      "--test extra_vars"
      "python-next"
    )
    ;;
  *)
    echo "test-lanes: unknown pass $pass (warm, cold or next)" >&2
    exit 2
    ;;
esac

# Every test binary runs in the warm pass: a new tests/*.rs missing from the lanes fails here.
if [[ "$pass" == warm ]]; then
  for file in tests/*.rs; do
    name=$(basename "$file" .rs)
    if [[ " ${lanes[*]} ${alone} " != *" --test $name "* ]]; then
      echo "test-lanes: tests/$name.rs is in no lane of the warm pass: add it to hack/test-lanes.sh" >&2
      exit 2
    fi
  done
fi

echo "test-lanes: building the tests"
hack/cargo-target.sh
cargo test --no-run --all-targets --quiet

# A lane's cargo arguments without the tests that need a Pod when there is no node.
without_node_tests() {
  local -a words=($1) kept=()
  local i
  for ((i = 0; i < ${#words[@]}; i++)); do
    if [[ ${words[i]} == --test && " ${NODE_TEST_BINARIES:?} " == *" ${words[i + 1]} "* ]]; then
      ((i += 1))
    else
      kept+=("${words[i]}")
    fi
  done
  echo "${kept[*]}"
}

if [[ ${NODE:-1} == 0 ]]; then
  for i in "${!lanes[@]}"; do
    lanes[i]=$(without_node_tests "${lanes[$i]}")
  done
  skips=(-- ${NODE_TEST_SKIPS:?})
else
  skips=()
fi

run_lane() {
  local spec=$1 log=$2 start=$SECONDS status=0
  case "$spec" in
    python) .venv/bin/python -m pytest tests/collection worker/tests -q ;;
    python-next) .venv-2.19/bin/python -m pytest tests/collection worker/tests -q ;;
    *)
      # shellcheck disable=SC2086 # the lane is a list of cargo arguments
      cargo test --no-fail-fast $spec "${skips[@]}"
      ;;
  esac >"$log" 2>&1 || status=$?
  echo "lane took $((SECONDS - start)) s" >>"$log"
  return "$status"
}

declare -A pids
for i in "${!lanes[@]}"; do
  name="$pass-$i"
  run_lane "${lanes[$i]}" "$logs/$name.log" &
  pids[$name]=$!
  echo "test-lanes: $name: ${lanes[$i]}"
done

failed=()
for name in "${!pids[@]}"; do
  wait "${pids[$name]}" || failed+=("$name")
done
if [[ ${NODE:-1} == 0 ]]; then
  alone=$(without_node_tests "$alone")
fi
if [[ -n "$alone" ]]; then
  echo "test-lanes: $pass-alone: $alone"
  run_lane "$alone" "$logs/$pass-alone.log" || failed+=("$pass-alone")
  pids[$pass-alone]=
fi
for name in "${!pids[@]}"; do
  grep -hE '^test result|^[0-9]+ passed|[0-9]+ failed|^lane took' "$logs/$name.log" | sed "s/^/  $name: /" || true
done
if ((${#failed[@]})); then
  for name in "${failed[@]}"; do
    echo "=================== test-lanes: $name FAILED: $logs/$name.log ==================="
    cat "$logs/$name.log"
  done
  echo "test-lanes: $pass: failed lanes: ${failed[*]}" >&2
  exit 1
fi
echo "test-lanes: $pass: every lane passed in $SECONDS s"
