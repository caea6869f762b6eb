#!/usr/bin/env bash
# Runs the Rust test suite against the local control plane in parallel lanes: test binaries that
# share nothing run side by side (each integration test uses its own namespace); the ones that share
# the SSH test hosts run one after another in the first lane of each pass; a test that changes what
# every other test relies on (tests/in_cluster.rs: `make undeploy` deletes the sample CRDs) runs by
# itself after the lanes, as do sharding, the KubernetesCluster test and the scaffold test (warm pass
# only). Builds the tests once first.
#
#   hack/test-lanes.sh warm        every test binary, operators on the warm executor (the default)
#   hack/test-lanes.sh cold        a slice with ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR=cold: what the
#                                  executor hands Ansible and gets back, and how its runs end (samples,
#                                  SSH runs, extra vars and inventories, playbooks and roles,
#                                  finalizers, faults, shutdown, masking, status, requeue, metrics,
#                                  plan).
#                                  The rest cannot tell the executors apart: both give the same
#                                  started run to everything downstream (src/executor/mod.rs)
#   hack/test-lanes.sh next        the newer toolchain's slice (.venv-2.19): samples, SSH runs,
#                                  finalizers, k8s_status, requeue_after, selectors, the executor, and
#                                  the Python tests
#   hack/test-lanes.sh cold next   several passes at once: their SSH lanes become one lane, the other
#                                  lanes run side by side (what `make test` runs after the warm pass)
#
# Every lane's end is printed as it happens, and every 10 minutes the test binary each running lane
# is at: a log cut short (a CI time limit) still shows where the time went.
# Logs: target/test-lanes/<passes>-<lane>.log; a failing lane's log is printed in full at the end.
# Needs KUBECONFIG (the Makefile's `test` target sets it and starts the cluster and hosts). With
# NODE=0 (a control plane without a node) the test binaries in NODE_TEST_BINARIES and the tests in
# NODE_TEST_SKIPS (`--skip name` ...) are left out: they need a running Pod (both set by the Makefile).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
(($#)) || { echo "usage: hack/test-lanes.sh warm|cold|next ..." >&2; exit 2; }
passes=("$@")
label=$(IFS=+; echo "${passes[*]}")
logs="$repo/target/test-lanes"
mkdir -p "$logs"
cd "$repo"

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

# Lanes: each is a list of steps, `<pass>:<cargo test arguments or python>`, separated by `;` and
# run in order; lanes run at the same time. A pass's first lane holds its tests of the SSH test
# hosts: with several passes, those are one lane. `alone` runs after every lane has ended.
lanes=()
alone=""
add_lanes() {
  local pass=$1 first=1 spec step lane
  local -a steps
  shift
  for spec in "$@"; do
    lane=""
    IFS=';' read -ra steps <<<"$spec"
    for step in "${steps[@]}"; do
      if [[ ${NODE:-1} == 0 ]]; then
        step=$(without_node_tests "$step")
      fi
      if [[ -n $step ]]; then
        lane+="${lane:+;}$pass:$step"
      fi
    done
    if [[ -n $lane ]] && ((first && ${#lanes[@]})); then
      lanes[0]+=";$lane"
    elif [[ -n $lane ]]; then
      lanes+=("$lane")
    fi
    first=0
  done
}

for pass in "${passes[@]}"; do
  case "$pass" in
    warm)
      warm=(
        "--lib --bins --test module_graph --test ssh --test security_inventory --test etcd_cluster --test etcd_restore"
        "--test operations --test deploy_manifests --test proxy --test ownership --test leader --test endpoints --test node --test pod_modules"
        "--test executor --test core --test extra_vars --test security_vars --test finalizers --test modes --test requeue --test samples --test status_and_filters --test toolchain --test watches_errors --test harness --test faults --test pause --test ready_conditions --test read_set --test admission"
        "--test history --test events --test api --test console --test storm --test startup_resync --test security_access --test replay --test secrets_masked --test plan"
        "python"
      )
      # After the lanes, by themselves: `make undeploy` deletes the sample CRDs, and with them every
      # CR of those kinds the other tests still use; sharding measures handovers against lease
      # durations, which the other lanes' load on two cores stretches past their bounds;
      # kubernetes_cluster runs three control planes on its SSH hosts (host5–host7): beside the lanes
      # it took 22 minutes and slowed them all, by itself it takes 6 or 7; scaffold's operator Pod,
      # held to the project's 500m CPU, missed its leader renew deadline beside the lanes (the
      # API server's answer took over 8 s to reach it) and restarted: by itself it takes 5 minutes.
      by_itself="--test in_cluster --test sharding --test kubernetes_cluster --test scaffold"
      # Every test binary runs in the warm pass: a new tests/*.rs missing from the lanes fails here.
      for file in tests/*.rs; do
        name=$(basename "$file" .rs)
        if [[ " ${warm[*]} $by_itself " != *" --test $name "* ]]; then
          echo "test-lanes: tests/$name.rs is in no lane of the warm pass: add it to hack/test-lanes.sh" >&2
          exit 2
        fi
      done
      add_lanes warm "${warm[@]}"
      if [[ ${NODE:-1} == 0 ]]; then
        by_itself=$(without_node_tests "$by_itself")
      fi
      alone="warm:$by_itself"
      ;;
    cold)
      add_lanes cold \
        "--test ssh --test security_inventory" \
        "--test core --test samples --test finalizers --test extra_vars --test security_vars --test modes --test plan" \
        "--test faults --test operations --test secrets_masked --test status_and_filters --test requeue --test endpoints"
      ;;
    next)
      add_lanes next \
        "--test ssh --test security_inventory --test samples --test pod_modules" \
        "--test finalizers --test status_and_filters --test requeue --test executor" \
        "--test toolchain version_reports;--test extra_vars" \
        "python"
      ;;
    *)
      echo "test-lanes: unknown pass $pass (warm, cold or next)" >&2
      exit 2
      ;;
  esac
done
if [[ ${NODE:-1} == 0 ]]; then
  skips=(-- ${NODE_TEST_SKIPS:?})
else
  skips=()
fi

echo "test-lanes: building the tests"
hack/cargo-target.sh
cargo test --no-run --all-targets --quiet

# One step of a lane: the pass chooses the executor or the toolchain.
run_step() {
  local pass=${1%%:*} spec=${1#*:} venv=.venv
  case "$pass" in
    cold) export ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR=cold ;;
    next)
      export ANSIBLE_OPERATOR_TEST_VENV="$repo/.venv-2.19"
      venv=.venv-2.19
      ;;
  esac
  echo "test-lanes: $(date +%T) $pass: $spec"
  case "$spec" in
    python) "$venv/bin/python" -m pytest tests/collection worker/tests -q ;;
    # shellcheck disable=SC2086 # the step is a list of cargo arguments
    *) cargo test --no-fail-fast $spec "${skips[@]}" ;;
  esac
}

run_lane() {
  local lane=$1 log=$2 start=$SECONDS status=0 step
  local -a steps
  IFS=';' read -ra steps <<<"$lane"
  for step in "${steps[@]}"; do
    (run_step "$step") >>"$log" 2>&1 || status=$?
  done
  echo "lane took $((SECONDS - start)) s" >>"$log"
  return "$status"
}

# Every 10 minutes, the test binary each lane that runs is at.
report_progress() {
  local name log at
  while sleep 600; do
    for name in "$@"; do
      log="$logs/$name.log"
      if [[ -s $log ]] && ! grep -q '^lane took' "$log"; then
        at=$(grep -oE 'Running (tests/[a-z_]+\.rs|unittests [^ ]+)|: python$' "$log" | tail -1 || true)
        at=${at#Running }
        echo "test-lanes: $(date +%T) $name is running ${at/#: python/the Python tests}"
      fi
    done
  done
}

names=()
for i in "${!lanes[@]}"; do
  names+=("$label-$i")
done
if [[ -n "$alone" ]]; then
  names+=("$label-alone")
fi
for name in "${names[@]}"; do
  : >"$logs/$name.log"
done
report_progress "${names[@]}" &
reporter=$!
trap 'kill "$reporter" 2>/dev/null || true' EXIT

# Each lane's end as it happens, so a log cut short still shows what ended when.
failed=()
ended=()
lane_ended() {
  local name=$1 code=$2
  ended+=("$name")
  if ((code)); then
    failed+=("$name")
    echo "test-lanes: $(date +%T) $name FAILED at $SECONDS s"
  else
    echo "test-lanes: $(date +%T) $name passed at $SECONDS s"
  fi
}

declare -A running
for i in "${!lanes[@]}"; do
  run_lane "${lanes[$i]}" "$logs/${names[i]}.log" &
  running[$!]=${names[i]}
  echo "test-lanes: $(date +%T) ${names[i]}: ${lanes[$i]}"
done
while ((${#running[@]})); do
  code=0
  wait -n -p pid "${!running[@]}" || code=$?
  lane_ended "${running[$pid]}" "$code"
  unset "running[$pid]"
done
if [[ -n "$alone" ]]; then
  echo "test-lanes: $(date +%T) $label-alone: $alone"
  code=0
  run_lane "$alone" "$logs/$label-alone.log" || code=$?
  lane_ended "$label-alone" "$code"
fi
for name in "${ended[@]}"; do
  grep -hE '^test result|^[0-9]+ passed|[0-9]+ failed|^lane took' "$logs/$name.log" | sed "s/^/  $name: /" || true
done
if ((${#failed[@]})); then
  for name in "${failed[@]}"; do
    echo "=================== test-lanes: $name FAILED: $logs/$name.log ==================="
    cat "$logs/$name.log"
  done
  echo "test-lanes: $label: failed lanes: ${failed[*]}" >&2
  exit 1
fi
echo "test-lanes: $label: every lane passed in $SECONDS s"
