#!/usr/bin/env bash
# Starts, stops and reports SSH test hosts: real sshd processes (Debian's openssh-server), one per
# loopback address, each with its own host key, login user and home directory, key-only login.
# They stand in for the machines an operator installs software on over SSH (the EtcdCluster sample,
# tests/ssh.rs). Needs root (it adds the login users and runs sshd).
# State lives under .local/test-hosts/: the client key, known_hosts, hosts.json, per host its sshd
# config, host key, PID file and log.
#
#   hack/test-hosts.sh install  install the pinned openssh-server when missing
#   hack/test-hosts.sh up       start what is not running, check a login on each host
#   hack/test-hosts.sh down     stop the sshd processes `up` started and everything the login users
#                               left running, empty their home directories
# The login users and homes are machine-wide: a clone touches them only while they are its own (the
# home authorises this clone's key), so `down` or `up` in a second clone leaves the first one's alone.
#   hack/test-hosts.sh status   say what runs
#
# Env: TEST_HOSTS (7) hosts on 127.0.0.11, .12, ...; TEST_HOSTS_PORT (2222). User of host N: ao-hostN.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state="$repo/.local/test-hosts"
count=${TEST_HOSTS:-7}
port=${TEST_HOSTS_PORT:-2222}
openssh_version=1:9.2p1-2+deb12u10
sshd=/usr/sbin/sshd

log() { echo "test-hosts: $*"; }
die() { echo "test-hosts: $*" >&2; exit 1; }

address() { echo "127.0.0.$((10 + $1))"; }
user() { echo "ao-host$1"; }
home() { echo "/home/ao-host$1"; }

# Whether host $1's user and home are this clone's: no home yet, or it authorises our key.
ours() {
  local keys
  keys="$(home "$1")/.ssh/authorized_keys"
  [[ ! -e "$keys" ]] || cmp -s "$keys" "$state/id_ed25519.pub"
}

listening() { [[ -n $(ss -Hltn "src $(address "$1"):$port") ]]; }

pid_of() {
  local file="$state/host$1/sshd.pid"
  [[ -f "$file" ]] || return 1
  local pid
  pid=$(<"$file")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

install_openssh() {
  if [[ -x "$sshd" ]] && dpkg-query -W -f='${Version}' openssh-server 2>/dev/null | grep -qx "$openssh_version"; then
    return
  fi
  [[ $(id -u) == 0 ]] || die "installing openssh-server needs root"
  log "installing openssh-server $openssh_version"
  local packages=("openssh-server=$openssh_version" "openssh-client=$openssh_version"
    "openssh-sftp-server=$openssh_version")
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null
  }
}

# The login user of host $1: own home, key-only (password field `*`, since `!` reads as locked
# when sshd runs without PAM), the client key authorised.
prepare_user() {
  local n=$1 name home
  name=$(user "$n")
  home=$(home "$n")
  if ! id "$name" >/dev/null 2>&1; then
    useradd --home-dir "$home" --shell /bin/bash --user-group "$name"
  fi
  usermod -p '*' -d "$home" "$name"
  rm -rf "$home"
  install -d -m 0755 -o "$name" -g "$name" "$home"
  install -d -m 0700 -o "$name" -g "$name" "$home/.ssh"
  install -m 0600 -o "$name" -g "$name" "$state/id_ed25519.pub" "$home/.ssh/authorized_keys"
}

write_config() {
  local n=$1 dir="$state/host$1"
  mkdir -p "$dir"
  [[ -f "$dir/ssh_host_ed25519_key" ]] || ssh-keygen -q -t ed25519 -N '' -C "host$n" -f "$dir/ssh_host_ed25519_key"
  cat >"$dir/sshd_config" <<EOF
ListenAddress $(address "$n"):$port
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AllowUsers $(user "$n")
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin no
StrictModes yes
AuthorizedKeysFile .ssh/authorized_keys
Subsystem sftp /usr/lib/openssh/sftp-server
MaxStartups 100
MaxSessions 100
LogLevel VERBOSE
EOF
}

check_login() {
  local n=$1
  ssh -q -i "$state/id_ed25519" -p "$port" -o BatchMode=yes -o ConnectTimeout=5 \
    -o UserKnownHostsFile="$state/known_hosts" -o StrictHostKeyChecking=yes \
    "$(user "$n")@$(address "$n")" true
}

up() {
  mkdir -p "$state" /run/sshd
  # Tests in several lanes call `up` at once (each on its first use of the hosts): one at a time.
  exec 9>"$state/up.lock"
  flock 9
  install_openssh
  [[ -f "$state/id_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -C ansible-operator-tests -f "$state/id_ed25519"
  : >"$state/known_hosts.new"
  local n hosts=()
  for ((n = 1; n <= count; n++)); do
    write_config "$n"
    echo "[$(address "$n")]:$port $(cut -d' ' -f1,2 "$state/host$n/ssh_host_ed25519_key.pub")" >>"$state/known_hosts.new"
    hosts+=("{\"name\":\"host$n\",\"address\":\"$(address "$n")\",\"port\":$port,\"user\":\"$(user "$n")\",\"home\":\"$(home "$n")\"}")
    if pid_of "$n" >/dev/null; then
      continue
    fi
    if ! ours "$n" && listening "$n"; then
      die "$(address "$n"):$port is taken by another clone's test hosts ($(home "$n") authorises another key): stop them there first"
    fi
    prepare_user "$n"
    "$sshd" -f "$state/host$n/sshd_config" -E "$state/host$n/sshd.log" 9>&-  # not holding up.lock
  done
  mv "$state/known_hosts.new" "$state/known_hosts"
  (IFS=,; echo "[${hosts[*]}]") >"$state/hosts.json"
  for ((n = 1; n <= count; n++)); do
    local deadline=$((SECONDS + 10))
    until check_login "$n"; do
      ((SECONDS < deadline)) || die "no login to $(user "$n")@$(address "$n"):$port; log: $state/host$n/sshd.log"
      sleep 0.2
    done
  done
  log "$count hosts up on $(address 1)..$(address "$count") port $port (client key $state/id_ed25519)"
}

down() {
  local n pid
  for ((n = 1; n <= count; n++)); do
    if pid=$(pid_of "$n"); then
      kill "$pid"
      log "stopped sshd of host$n ($pid)"
    fi
    rm -f "$state/host$n/sshd.pid"
    if ! ours "$n"; then
      log "leaving $(user "$n") alone: $(home "$n") belongs to another clone's test hosts"
    elif id "$(user "$n")" >/dev/null 2>&1; then
      pkill -KILL -u "$(user "$n")" 2>/dev/null || true
      rm -rf "$(home "$n")"
    fi
  done
}

status() {
  local n pid
  for ((n = 1; n <= count; n++)); do
    if pid=$(pid_of "$n"); then
      echo "host$n: $(user "$n")@$(address "$n"):$port, sshd pid $pid"
    else
      echo "host$n: not running"
    fi
  done
}

case "${1:-}" in
  install) install_openssh ;;
  up) up ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 install|up|down|status" ;;
esac
