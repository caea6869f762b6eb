#!/usr/bin/env bash
# Runs the test suite against the local control plane in parallel lanes: the modules of the one
# integration test binary (tests/suite.rs; a module is a file, tests/<module>.rs), the unit tests and
# the Python tests. Modules that share nothing run side by side (each integration test uses its own
# namespace); the ones that share the SSH test hosts run one after another in the first lane of each
# pass; a test that changes what every other test relies on (tests/in_cluster.rs: `make undeploy`
# deletes the sample CRDs) runs by itself after the lanes, as do sharding, the KubernetesCluster test
# and the scaffold test (warm pass only). Builds the tests once first.
#
#   hack/test-lanes.sh warm        every module but kubernetes_cluster, operators on the warm
#                                  executor (the default)
#   hack/test-lanes.sh warm-late   kubernetes_cluster, on the warm executor: it runs on host5–host7
#                                  beside other lanes (by itself it left a third of the two cores idle
#                                  for ten minutes), but not beside the warm pass's lanes (22 minutes
#                                  there, and it slowed them all)
#   hack/test-lanes.sh cold        a slice with ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR=cold: what the
#                                  executor hands Ansible and gets back, and how its runs end (samples,
#                                  SSH runs, extra vars and inventories, playbooks and roles,
#                                  finalizers, faults, shutdown, masking, status, requeue, metrics,
#                                  plan).
#                                  The rest cannot tell the executors apart: both give the same
#                                  started run to everything downstream (src/executor/mod.rs)
#   hack/test-lanes.sh next        the newest toolchain's slice (.venv-2.21: ansible-core 2.21 on
#                                  Python 3.13): samples, SSH runs, finalizers, k8s_status,
#                                  requeue_after, selectors, the executor, and the Python tests; and
#                                  the Python tests on the 2.19 line (.venv-2.19)
#   hack/test-lanes.sh cold next warm-late
#                                  several passes at once: their SSH lanes become one lane, the other
#                                  lanes run side by side (what `make test` runs after the warm pass)
#
# Every lane's end is printed as it happens, and every 10 minutes (and when the script is stopped)
# the module each running lane is at: a log cut short (a CI time limit) still shows where the time
# went. Each lane's log has each unit's time.
# Logs: target/test-lanes/<passes>-<lane>.log; a failing lane's log is printed in full at the end.
# Needs KUBECONFIG (the Makefile's `test` target sets it and starts the cluster and hosts). With
# NODE=0 (a control plane without a node) the modules in NODE_TEST_MODULES and the tests in
# NODE_TEST_SKIPS (`--skip name` ...) are left out: they need a running Pod (both set by the Makefile).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
(($#)) || { echo "usage: hack/test-lanes.sh warm|warm-late|cold|next ..." >&2; exit 2; }
passes=("$@")
label=$(IFS=+; echo "${passes[*]}")
logs="$repo/target/test-lanes"
mkdir -p "$logs"
cd "$repo"

# A lane's units without the tests that need a Pod when there is no node.
without_node_tests() {
  local unit kept=()
  for unit in $1; do
    if [[ " ${NODE_TEST_MODULES:?} " != *" ${unit%%::*} "* ]]; then
      kept+=("$unit")
    fi
  done
  echo "${kept[*]}"
}

# Lanes: each is a list of units, `<pass>:<unit>` separated by spaces and run in order; lanes run at
# the same time. A unit is `lib` (the unit tests), `python` (the Python tests; `python-2.19` runs
# them on .venv-2.19), a module of the test suite (`core`: tests/core.rs, see tests/suite.rs) or the
# tests of a module whose names start with a prefix (`toolchain::version_reports`). A pass's first lane holds its tests of the SSH test hosts:
# with several passes, those are one lane. `alone` runs after every lane has ended.
lanes=()
alone=""
add_lanes() {
  local pass=$1 first=1 spec unit lane
  shift
  for spec in "$@"; do
    if [[ ${NODE:-1} == 0 ]]; then
      spec=$(without_node_tests "$spec")
    fi
    lane=""
    for unit in $spec; do
      lane+="${lane:+ }$pass:$unit"
    done
    if [[ -n $lane ]] && ((first && ${#lanes[@]})); then
      lanes[0]+=" $lane"
    elif [[ -n $lane ]]; then
      lanes+=("$lane")
    fi
    first=0
  done
}

warm_late="kubernetes_cluster"
# Modules of the newest toolchain's pass only: the image it runs in is built for that toolchain.
next_only="newest_toolchain_image"
for pass in "${passes[@]}"; do
  case "$pass" in
    warm)
      warm=(
        "lib module_graph ssh security_inventory etcd_cluster"
        "operations deploy_manifests proxy ownership leader endpoints node pod_modules injection"
        "executor core extra_vars security_vars finalizers modes requeue samples status_and_filters toolchain watches_errors harness faults pause ready_conditions read_set admission conversion traces"
        "history proposed_permissions events api console storm startup_resync security_access replay secrets_masked plan plan_dry_run"
        "etcd_restore python least_privilege test_command"
      )
      # etcd_restore and test_command (the EtcdCluster scenario) are on host5–host7, as
      # kubernetes_cluster is, which runs after these lanes (warm-late).
      # After the lanes, by themselves: `make undeploy` deletes the sample CRDs, and with them every
      # CR of those kinds the other tests still use; sharding measures handovers against lease
      # durations, which the other lanes' load on two cores stretches past their bounds; scaffold's
      # operator Pod, held to the project's 500m CPU, missed its leader renew deadline beside the
      # lanes (the API server's answer took over 8 s to reach it) and restarted: by itself it takes
      # 5 minutes.
      by_itself="in_cluster sharding scaffold"
      # Every test file is a module of the suite and runs in the warm pass (or warm-late): a new
      # tests/*.rs missing from either fails here.
      for file in tests/*.rs; do
        name=$(basename "$file" .rs)
        if [[ $name == suite ]]; then
          continue
        elif ! grep -qx "mod $name;" tests/suite.rs; then
          echo "test-lanes: tests/$name.rs is not a module of tests/suite.rs: add \`mod $name;\` there" >&2
          exit 2
        elif [[ " ${warm[*]} $by_itself $warm_late $next_only " != *" $name "* ]]; then
          echo "test-lanes: tests/$name.rs is in no lane of the warm pass: add it to hack/test-lanes.sh" >&2
          exit 2
        fi
      done
      add_lanes warm "${warm[@]}"
      if [[ ${NODE:-1} == 0 ]]; then
        by_itself=$(without_node_tests "$by_itself")
      fi
      alone=$(for unit in $by_itself; do echo -n "warm:$unit "; done)
      alone=${alone% }
      ;;
    warm-late)
      # No lane on host1–host4 (its first lane is empty): it runs beside the other passes' SSH lanes.
      add_lanes warm-late "" "$warm_late"
      ;;
    cold)
      add_lanes cold \
        "ssh security_inventory" \
        "core samples finalizers extra_vars security_vars modes plan" \
        "faults operations secrets_masked status_and_filters requeue endpoints injection"
      ;;
    next)
      add_lanes next \
        "ssh security_inventory samples pod_modules" \
        "finalizers status_and_filters requeue executor newest_toolchain_image" \
        "toolchain::version_reports extra_vars injection" \
        "python" \
        "python-2.19"
      ;;
    *)
      echo "test-lanes: unknown pass $pass (warm, warm-late, cold or next)" >&2
      exit 2
      ;;
  esac
done
if [[ ${NODE:-1} == 0 ]]; then
  read -ra skips <<<"${NODE_TEST_SKIPS:?}"
else
  skips=()
fi

echo "test-lanes: $(date +%T) building the tests"
hack/cargo-target.sh
cargo test --no-run --all-targets --quiet
echo "test-lanes: $(date +%T) built the tests"

# One unit of a lane: the pass chooses the executor or the toolchain.
run_unit() {
  local pass=${1%%:*} unit=${1#*:} venv=.venv filter
  case "$pass" in
    cold) export ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR=cold ;;
    next)
      export ANSIBLE_OPERATOR_TEST_VENV="$repo/.venv-2.21"
      venv=.venv-2.21
      ;;
  esac
  echo "test-lanes: $(date +%T) $pass: $unit"
  case "$unit" in
    python) "$venv/bin/python" -m pytest tests/collection worker/tests -q ;;
    python-2.19) .venv-2.19/bin/python -m pytest tests/collection worker/tests -q ;;
    lib) cargo test --no-fail-fast --lib --bins -- "${skips[@]}" ;;
    *)
      filter=$unit
      [[ $filter == *::* ]] || filter+="::"
      cargo test --no-fail-fast --test suite -- "$filter" "${skips[@]}"
      ;;
  esac
}

run_lane() {
  local lane=$1 log=$2 start=$SECONDS status=0 unit began
  for unit in $lane; do
    began=$SECONDS
    (
      code=0
      run_unit "$unit" || code=$?
      # The CPU time of the unit's processes (its tests, their operators, Ansible), as each was
      # waited for: what the unit costs the machine, however long the other lanes made it wait.
      times >"$log.cpu"
      echo "test-lanes: $unit took $((SECONDS - began)) s, CPU $(tail -1 "$log.cpu" | tr ' ' '+')"
      if ((code)); then
        echo "test-lanes: $unit FAILED with exit status $code"
      fi
      exit "$code"
    ) >>"$log" 2>&1 || status=$?
  done
  echo "lane took $((SECONDS - start)) s" >>"$log"
  return "$status"
}

# Where each lane that has not ended is: its unit, and since when.
lanes_at() {
  local name log at
  for name in "$@"; do
    log="$logs/$name.log"
    if [[ -s $log ]] && ! grep -q '^lane took' "$log"; then
      at=$(grep -E '^test-lanes: [0-9:]+ [a-z-]+: ' "$log" | tail -1 || true)
      read -r _ since unit <<<"$at"
      echo "test-lanes: $(date +%T) $name is at ${unit:-its start} (since ${since:-?})"
    fi
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
rm -f "$logs/$label.failed"
# Every 10 minutes, and when stopped (a CI time limit), where each running lane is. The reporter
# ends its sleep when it ends: a sleep left behind would hold the output open for 10 minutes.
report_progress() {
  local sleeper
  trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
  while true; do
    sleep 600 &
    sleeper=$!
    wait "$sleeper"
    lanes_at "$@"
  done
}
report_progress "${names[@]}" &
reporter=$!
trap 'kill "$reporter" 2>/dev/null || true' EXIT
trap 'echo "test-lanes: $(date +%T) stopped at $SECONDS s"; lanes_at "${names[@]}"; exit 143' TERM INT

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
# Per lane: its tests passed and failed, and its time.
for name in "${ended[@]}"; do
  awk -v name="$name" '
    /^test result|^[0-9]+ (passed|failed)/ {
      for (i = 1; i < NF; i++) {
        if ($(i + 1) ~ /^passed/) passed += $i
        if ($(i + 1) ~ /^failed/) failed += $i
      }
    }
    /^lane took/ { took = $3 }
    END { printf "  %s: %d passed, %d failed, %d s\n", name, passed, failed, took }
  ' "$logs/$name.log"
done
if ((${#failed[@]})); then
  for name in "${failed[@]}"; do
    echo "=================== test-lanes: $name FAILED: $logs/$name.log ==================="
    cat "$logs/$name.log"
  done
  # Last, so that the end of a long output (all a CI summary may show) says what failed: each
  # failed unit, its failed tests, and where and why each panicked (first line of the message).
  # Also kept in $label.failed, for make test to repeat after its last pass.
  echo "=================== test-lanes: $label: what failed ==================="
  for name in "${failed[@]}"; do
    awk -v name="$name" '
      /^test-lanes: .* FAILED with exit status/ { print name ": " substr($0, 13) }
      /^test .* FAILED$/ { print name ": " $0 }
      /process didn.t exit successfully/ { print name ": " substr($0, 1, 300) }
      /^thread .* panicked at / { print name ": " $0; panicked = 1; next }
      panicked { print name ":   " substr($0, 1, 700); panicked = 0 }
    ' "$logs/$name.log"
  done | tee "$logs/$label.failed"
  echo "test-lanes: $label: failed lanes: ${failed[*]}" >&2
  exit 1
fi
echo "test-lanes: $label: every lane passed in $SECONDS s"
