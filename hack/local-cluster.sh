#!/usr/bin/env bash
# Starts, stops and reports a local Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver and
# kube-controller-manager (garbage collector, namespace and service-account controllers).
# State lives under .local/cluster/: certificates, etcd data, logs, PID files and the admin kubeconfig.
#
#   hack/local-cluster.sh up       start what is not running, wait for /readyz, print `export KUBECONFIG=...`
#   hack/local-cluster.sh down     stop exactly the processes `up` started, remove the etcd data
#   hack/local-cluster.sh status   say what runs
#
# Ports (env): ETCD_PORT (12379), ETCD_PEER_PORT (12380), APISERVER_PORT (16443), KCM_PORT (20257).
# They stay clear of the operator's own ports (8888, 8443, 6789, 5050).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state="$repo/.local/cluster"
bin="$repo/.local/bin"
pki="$state/pki"
pids="$state/pids"
logs="$state/logs"
kubeconfig="$state/kubeconfig"
etcd_port=${ETCD_PORT:-12379}
etcd_peer_port=${ETCD_PEER_PORT:-12380}
apiserver_port=${APISERVER_PORT:-16443}
kcm_port=${KCM_PORT:-20257}
components=(etcd kube-apiserver kube-controller-manager)

log() { echo "local-cluster: $*"; }
die() { echo "local-cluster: $*" >&2; exit 1; }

pid_of() {
  local file="$pids/$1.pid"
  [[ -f "$file" ]] || return 1
  local pid
  pid=$(<"$file")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

healthy() {
  case "$1" in
    etcd) curl -sf --max-time 2 "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"' ;;
    kube-apiserver)
      [[ "$(curl -s --max-time 2 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
        "https://127.0.0.1:$apiserver_port/readyz")" == ok ]] ;;
    kube-controller-manager) [[ "$(curl -sk --max-time 2 "https://127.0.0.1:$kcm_port/healthz")" == ok ]] ;;
  esac
}

wait_healthy() {
  local name=$1 deadline=$((SECONDS + ${2:-60}))
  until healthy "$name"; do
    if ! pid_of "$name" >/dev/null; then
      tail -n 20 "$logs/$name.log" >&2 || true
      die "$name exited during start-up; log: $logs/$name.log"
    fi
    ((SECONDS < deadline)) || die "$name not healthy after ${2:-60}s; log: $logs/$name.log"
    sleep 0.2
  done
}

ensure_pki() {
  [[ -f "$pki/admin.crt" ]] && return
  log "generating certificates and the service-account key pair in $pki"
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=local-cluster-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key \
      -out apiserver.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=admin" -keyout admin.key \
      -out admin.csr 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >admin.ext
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile admin.ext -out admin.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.csr ./*.ext
  )
}

write_kubeconfig() {
  local b64='base64 -w0'
  cat >"$kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority-data: $($b64 <"$pki/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $($b64 <"$pki/admin.crt")
    client-key-data: $($b64 <"$pki/admin.key")
contexts:
- name: local
  context:
    cluster: local
    user: admin
    namespace: default
current-context: local
EOF
  mv "$kubeconfig.tmp" "$kubeconfig"
}

start() {
  local name=$1; shift
  if pid_of "$name" >/dev/null; then
    log "$name already running (pid $(pid_of "$name"))"
    return
  fi
  [[ -x "$bin/$name" ]] || die "$bin/$name is missing; run hack/install-kube.sh"
  log "starting $name (log: $logs/$name.log)"
  setsid "$bin/$name" "$@" >"$logs/$name.log" 2>&1 </dev/null &
  echo $! >"$pids/$name.pid"
}

up() {
  mkdir -p "$pids" "$logs"
  ensure_pki
  write_kubeconfig
  start etcd --name local --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "local=http://127.0.0.1:$etcd_peer_port" \
    --heartbeat-interval 10 --election-timeout 100 --unsafe-no-fsync --log-level warn
  wait_healthy etcd 30
  start kube-apiserver --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$apiserver_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --allow-privileged=true --profiling=false
  wait_healthy kube-apiserver 90
  start kube-controller-manager --kubeconfig "$kubeconfig" \
    --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
    --controllers garbagecollector,namespace,serviceaccount \
    --use-service-account-credentials=false --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --root-ca-file "$pki/ca.crt" \
    --service-account-private-key-file "$pki/sa.key" --profiling=false
  wait_healthy kube-controller-manager 60
  log "ready: kube-apiserver https://127.0.0.1:$apiserver_port, etcd http://127.0.0.1:$etcd_port"
  echo "export KUBECONFIG=$kubeconfig"
}

down() {
  local name pid
  for ((i = ${#components[@]} - 1; i >= 0; i--)); do
    name=${components[i]}
    if pid=$(pid_of "$name"); then
      log "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pids/$name.pid"
  done
  rm -rf "$state/etcd"
  log "stopped"
}

status() {
  local name pid state_word code=0
  for name in "${components[@]}"; do
    if pid=$(pid_of "$name"); then
      if healthy "$name"; then state_word=healthy; else state_word=unhealthy; code=1; fi
      echo "$name: running (pid $pid), $state_word"
    else
      echo "$name: stopped"
      code=1
    fi
  done
  return "$code"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 up|down|status" ;;
esac
