#!/usr/bin/env bash
# Starts, stops and reports a local Kubernetes cluster: a control plane on 127.0.0.1 (etcd,
# kube-apiserver, kube-controller-manager with the controllers an operator's objects rely on) and,
# unless NODE=0, one node: kube-scheduler, containerd (Debian's, with runc and cgroupfs), a kubelet,
# a CNI bridge for Pod networks, and a forwarder that makes the `kubernetes` Service address reach
# the API server from Pods. State lives under .local/cluster/: certificates, etcd data, logs, PID
# files, the admin kubeconfig, containerd's config, socket, state and images, the kubelet's
# directory, Pod logs.
#
#   hack/local-cluster.sh up       start what is not running, wait until healthy (the node: Ready),
#                                  print `export KUBECONFIG=...`
#   hack/local-cluster.sh down     stop exactly what `up` started: Pods and their networks first,
#                                  then the node, then the control plane; unmount what they left
#                                  mounted; remove the etcd data and the node's runtime state
#                                  (containerd keeps its images)
#   hack/local-cluster.sh status   say what runs
#
# Ports (env): ETCD_PORT (12379), ETCD_PEER_PORT (12380), APISERVER_PORT (16443), KCM_PORT (20257),
# SCHEDULER_PORT (20259), KUBELET_PORT (20250), KUBELET_HEALTHZ_PORT (20248).
# They stay clear of the operator's own ports (8888, 8443, 6789, 5050).
# The node: NODE (1; 0 starts the control plane only), NODE_NAME (local-node). It needs root,
# hack/install-node.sh and hack/images.sh. Its network: the bridge ao-cni0 with 10.244.0.1/24 (the
# node's address; each Pod gets one of the /24 in its own network namespace) and 10.0.0.1, the
# `kubernetes` Service, forwarded to the API server. Nothing leaves the machine: no masquerading, no
# route out, no iptables rules.
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
scheduler_port=${SCHEDULER_PORT:-20259}
kubelet_port=${KUBELET_PORT:-20250}
kubelet_healthz_port=${KUBELET_HEALTHZ_PORT:-20248}
node=${NODE:-1}
node_name=${NODE_NAME:-local-node}
bridge=ao-cni0
pod_subnet=10.244.0.0/24
node_ip=10.244.0.1
service_ip=10.0.0.1
containerd_dir="$state/containerd"
containerd_sock="$containerd_dir/containerd.sock"
kubelet_dir="$state/kubelet"
# The controllers of kube-controller-manager: garbage collection, namespaces and service accounts
# for the control plane alone; with a node also what turns a user's Deployments, StatefulSets and
# Jobs into Pods, tracks the node and fills EndpointSlices.
controllers=garbagecollector,namespace,serviceaccount,root-ca-cert-publisher,deployment,replicaset
controllers+=,statefulset,daemonset,job,cronjob,nodelifecycle,endpoint,endpointslice,podgc,disruption
# In start order; `down` stops them in reverse, whichever of them runs.
components=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubernetes-service kubelet)

log() { echo "local-cluster: $*"; }
die() { echo "local-cluster: $*" >&2; exit 1; }

# Whether process $1 runs: exists and is no zombie (an exited process stays one until this
# machine's init reaps it, which can take seconds).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ "${stat%% *}" != Z ]]
}

pid_of() {
  local file="$pids/$1.pid"
  [[ -f "$file" ]] || return 1
  local pid
  pid=$(<"$file")
  alive "$pid" || return 1
  echo "$pid"
}

admin_curl() { curl -s --max-time 2 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$@"; }

healthy() {
  case "$1" in
    etcd) curl -sf --max-time 2 "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"' ;;
    kube-apiserver) [[ "$(admin_curl "https://127.0.0.1:$apiserver_port/readyz")" == ok ]] ;;
    kube-controller-manager) [[ "$(curl -sk --max-time 2 "https://127.0.0.1:$kcm_port/healthz")" == ok ]] ;;
    kube-scheduler) [[ "$(curl -sk --max-time 2 "https://127.0.0.1:$scheduler_port/healthz")" == ok ]] ;;
    containerd) ctr --address "$containerd_sock" version >/dev/null 2>&1 ;;
    kubernetes-service) [[ "$(admin_curl "https://$service_ip/readyz")" == ok ]] ;;
    kubelet) [[ "$(curl -s --max-time 2 "http://127.0.0.1:$kubelet_healthz_port/healthz")" == ok ]] ;;
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

# A certificate signed by the cluster CA, made once: base name, subject, openssl extensions.
issue() {
  local name=$1 subject=$2 extensions=$3
  [[ -f "$pki/$name.crt" ]] && return
  (
    cd "$pki"
    openssl req -newkey rsa:2048 -nodes -subj "$subject" -keyout "$name.key" -out "$name.csr" 2>/dev/null
    printf '%b' "$extensions" >"$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile "$name.ext" -out "$name.crt" 2>/dev/null
    rm -f "$name.csr" "$name.ext"
  )
}

ensure_pki() {
  # Python 3.13 verifies strictly (VERIFY_X509_STRICT): a CA without keyUsage is refused. A CA made
  # before it had one is made again, with everything it signed.
  if [[ -f "$pki/ca.crt" ]] && ! openssl x509 -in "$pki/ca.crt" -noout -ext keyUsage 2>/dev/null | grep -q 'Certificate Sign'; then
    log "the cluster CA in $pki has no keyUsage (Python 3.13 refuses it): making the certificates again"
    find "$pki" -maxdepth 1 -type f ! -name "sa.*" -delete
  fi
  if [[ ! -f "$pki/ca.crt" ]]; then
    log "generating certificates and the service-account key pair in $pki"
    mkdir -p "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=local-cluster-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  fi
  issue apiserver "/CN=kube-apiserver" \
    "subjectAltName=IP:127.0.0.1,IP:$service_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n"
  issue admin "/O=system:masters/CN=admin" 'extendedKeyUsage=clientAuth\n'
  # The API server's identity towards kubelets (logs, exec, port-forward).
  issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" 'extendedKeyUsage=clientAuth\n'
  # The kubelet: system:node:<name> for the Node authorizer, and its serving certificate.
  issue "kubelet-$node_name" "/O=system:nodes/CN=system:node:$node_name" 'extendedKeyUsage=clientAuth\n'
  issue "kubelet-serving-$node_name" "/CN=$node_name" \
    "subjectAltName=IP:$node_ip,DNS:$node_name\nextendedKeyUsage=serverAuth\n"
  if [[ ! -f "$pki/sa.key" ]]; then
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  fi
}

# A kubeconfig for the cluster: path, user name, certificate base name in $pki.
write_kubeconfig() {
  local path=$1 user=$2 cert=$3 b64='base64 -w0'
  cat >"$path.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority-data: $($b64 <"$pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $($b64 <"$pki/$cert.crt")
    client-key-data: $($b64 <"$pki/$cert.key")
contexts:
- name: local
  context:
    cluster: local
    user: $user
    namespace: default
current-context: local
EOF
  mv "$path.tmp" "$path"
}

# start NAME COMMAND ARGS...: runs COMMAND in its own session, logging to $logs/NAME.log.
start() {
  local name=$1 command=$2; shift 2
  if pid_of "$name" >/dev/null; then
    log "$name already running (pid $(pid_of "$name"))"
    return
  fi
  log "starting $name (log: $logs/$name.log)"
  setsid "$command" "$@" >"$logs/$name.log" 2>&1 </dev/null &
  echo $! >"$pids/$name.pid"
}

need_bin() { [[ -x "$bin/$1" ]] || die "$bin/$1 is missing; run hack/install-kube.sh"; }

control_plane() {
  local name
  for name in etcd kube-apiserver kube-controller-manager; do need_bin "$name"; done
  start etcd "$bin/etcd" --name local --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "local=http://127.0.0.1:$etcd_peer_port" \
    --heartbeat-interval 10 --election-timeout 100 --unsafe-no-fsync --log-level warn
  wait_healthy etcd 30
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$apiserver_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --allow-privileged=true --profiling=false \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP
  wait_healthy kube-apiserver 90
  start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$kubeconfig" \
    --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
    --controllers "$controllers" \
    --use-service-account-credentials=false --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --root-ca-file "$pki/ca.crt" \
    --service-account-private-key-file "$pki/sa.key" --profiling=false \
    --node-monitor-grace-period 40s
  wait_healthy kube-controller-manager 60
}

write_containerd_config() {
  mkdir -p "$containerd_dir" "$state/cni/net.d"
  cat >"$containerd_dir/config.toml" <<EOF
# Written by hack/local-cluster.sh: the local node's containerd, with its own root (images),
# state, sockets and CNI configuration under $state.
version = 2
root = "$containerd_dir/root"
state = "$containerd_dir/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$containerd_sock"
[ttrpc]
  address = "$containerd_sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$containerd_dir/opt"

[plugins."io.containerd.grpc.v1.cri"]
  # Built locally by hack/images.sh: no registry is reachable.
  sandbox_image = "$(hack_images name pause)"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # What this machine's kernel and sandbox need (without them the sandbox fails with "can't get
  # final child's PID from pipe"): no OOM score below containerd's own, no AppArmor profile, no
  # hugetlb cgroup.
  restrict_oom_score_adj = true
  disable_apparmor = true
  disable_hugetlb_controller = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "$containerd_dir/state/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/cni/net.d"
    max_conf_num = 1
EOF
  # Written aside and renamed: containerd reloads the directory on every change.
  local conflist="$state/cni/net.d/10-local-cluster.conflist"
  cat >"$conflist.tmp" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "local-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$pod_subnet", "gateway": "$node_ip"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$state/cni/ipam"
      }
    }
  ]
}
EOF
  mv "$conflist.tmp" "$conflist"
}

write_kubelet_config() {
  mkdir -p "$kubelet_dir" "$state/pod-logs"
  write_kubeconfig "$kubelet_dir/kubeconfig" "system:node:$node_name" "kubelet-$node_name"
  cat >"$kubelet_dir/config.yaml" <<EOF
# Written by hack/local-cluster.sh: the local node's kubelet.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz_port
tlsCertFile: $pki/kubelet-serving-$node_name.crt
tlsPrivateKeyFile: $pki/kubelet-serving-$node_name.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$containerd_sock
podLogsDir: $state/pod-logs
# This machine: cgroup v1 without systemd, swap allowed, no per-QoS cgroup hierarchy.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
# The images exist only here (hack/images.sh): never garbage-collect them, never evict for a
# nearly full disk of a development machine.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
# The host's iptables stay untouched.
makeIPTablesUtilChains: false
resolvConf: /etc/resolv.conf
syncFrequency: 10s
EOF
}

hack_images() { "$repo/hack/images.sh" "$@"; }

# The bridge and the two addresses the node serves on; the CNI bridge plugin adopts the bridge. The
# bridge is machine-wide: $state/bridge marks it as this clone's, and only its owner removes it. The
# bridge's alias names its owner's state directory, so a bridge whose clone was deleted without
# `down` (its marker is gone) is taken over rather than blocking every later node on the machine.
network_up() {
  if ip link show "$bridge" >/dev/null 2>&1 && [[ ! -e "$state/bridge" ]]; then
    local owner
    owner=$(cat "/sys/class/net/$bridge/ifalias" 2>/dev/null || true)
    if [[ -n $owner && -e $owner/bridge ]] || { [[ -z $owner ]] && pgrep -x kubelet >/dev/null; }; then
      die "$bridge belongs to another clone's node (${owner:-unknown clone}; one node per machine): stop it there, or NODE=0"
    fi
    log "taking over $bridge, left by ${owner:-a clone} that no longer runs a node"
  fi
  touch "$state/bridge"
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    log "creating the Pod network bridge $bridge ($node_ip/24, $service_ip/32)"
    ip link add "$bridge" type bridge
  fi
  ip link set dev "$bridge" alias "$state"
  ip addr replace "$node_ip/24" dev "$bridge"
  ip addr replace "$service_ip/32" dev "$bridge"
  ip link set "$bridge" up
}

network_down() {
  [[ -e "$state/bridge" ]] || return 0
  rm -f "$state/bridge"
  if ip link show "$bridge" >/dev/null 2>&1; then
    log "removing the Pod network bridge $bridge"
    ip link delete "$bridge"
  fi
  rm -rf "$state/cni/ipam"
}

node_up() {
  [[ $(id -u) == 0 ]] || die "the node needs root (NODE=0 starts the control plane only)"
  for command in containerd ctr runc socat /usr/lib/cni/bridge; do
    command -v "$command" >/dev/null || die "$command is missing; run hack/install-node.sh (or NODE=0)"
  done
  need_bin kube-scheduler
  need_bin kubelet
  need_bin cri-reset
  start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$kubeconfig" \
    --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port "$scheduler_port" --profiling=false
  hack_images node
  network_up
  write_containerd_config
  start containerd /usr/bin/containerd --config "$containerd_dir/config.toml" --log-level warn
  wait_healthy containerd 30
  hack_images load "$(hack_images name pause)" "$(hack_images name memcached)"
  # Pods reach the API server as the `kubernetes` Service, 10.0.0.1:443; without kube-proxy, this
  # forwarder on that address is the Service.
  start kubernetes-service "$(command -v socat)" \
    "TCP-LISTEN:443,bind=$service_ip,reuseaddr,fork" "TCP:127.0.0.1:$apiserver_port"
  wait_healthy kubernetes-service 10
  wait_healthy kube-scheduler 60
  write_kubelet_config
  start kubelet "$bin/kubelet" --config "$kubelet_dir/config.yaml" --kubeconfig "$kubelet_dir/kubeconfig" \
    --root-dir "$kubelet_dir" --hostname-override "$node_name" --node-ip "$node_ip" --v 1
  wait_healthy kubelet 60
  local deadline=$((SECONDS + 90)) ready=""
  until [[ "$ready" == True ]]; do
    ready=$(KUBECONFIG="$kubeconfig" "$bin/kubectl" get node "$node_name" \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
    pid_of kubelet >/dev/null || { tail -n 20 "$logs/kubelet.log" >&2; die "kubelet exited; log: $logs/kubelet.log"; }
    ((SECONDS < deadline)) || die "node $node_name not Ready after 90s; log: $logs/kubelet.log"
    [[ "$ready" == True ]] || sleep 0.5
  done
  log "node $node_name Ready ($node_ip), Pods on $pod_subnet"
}

up() {
  mkdir -p "$pids" "$logs"
  ensure_pki
  write_kubeconfig "$kubeconfig" admin admin
  control_plane
  if [[ "$node" == 0 ]]; then
    log "NODE=0: no node. Pods are never scheduled or run: Deployments stay at 0 ready replicas, kubectl logs/exec have no container to reach; the tests that need a Pod (tests/in_cluster.rs, tests/node.rs, tests/pod_modules.rs, the memcached sample tests) cannot pass"
  else
    node_up
  fi
  log "ready: kube-apiserver https://127.0.0.1:$apiserver_port, etcd http://127.0.0.1:$etcd_port"
  echo "export KUBECONFIG=$kubeconfig"
}

stop() {
  local name=$1 pid
  if pid=$(pid_of "$name"); then
    log "stopping $name (pid $pid)"
    # The whole session: socat's per-connection children too.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pids/$name.pid"
}

# Everything mounted below $1 (deepest first).
mounts_below() { findmnt -rn -o TARGET | awk -v dir="$1/" 'index($0, dir) == 1' | sort -r; }

down() {
  local name i
  for ((i = ${#components[@]} - 1; i >= 0; i--)); do
    name=${components[i]}
    # With the kubelet gone, nothing restarts Pods: remove them through the CRI while containerd
    # still runs, so their networks are torn down and their root filesystems unmounted.
    if [[ "$name" == containerd ]] && pid_of containerd >/dev/null; then
      log "removing every Pod from containerd"
      "$bin/cri-reset" -endpoint "$containerd_sock" || log "some Pods were not removed; unmounting below"
    fi
    stop "$name"
  done
  local mount
  for mount in $(mounts_below "$state"); do
    log "unmounting $mount"
    umount "$mount" 2>/dev/null || umount -l "$mount"
  done
  network_down
  # The containers' cgroups (empty once runc has deleted them; rmdir refuses anything else) and
  # the shim socket directory containerd 1.6 keeps in /run/containerd whatever its state dir.
  local dir
  for dir in /sys/fs/cgroup/*/k8s.io; do
    [[ -d "$dir" ]] || continue
    find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rmdir /run/containerd/s /run/containerd 2>/dev/null || true
  rm -f "$containerd_sock" "$containerd_sock.ttrpc"
  rm -rf --one-file-system "$state/etcd" "$kubelet_dir" "$containerd_dir/state" "$containerd_dir/opt" \
    "$state/pod-logs"
  log "stopped"
}

status() {
  local name pid state_word code=0
  for name in "${components[@]}"; do
    if pid=$(pid_of "$name"); then
      if healthy "$name"; then state_word=healthy; else state_word=unhealthy; code=1; fi
      echo "$name: running (pid $pid), $state_word"
    elif [[ "$node" == 0 && " kube-scheduler containerd kubernetes-service kubelet " == *" $name "* ]]; then
      echo "$name: stopped (NODE=0)"
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
