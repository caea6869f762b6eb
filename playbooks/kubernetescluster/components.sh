#!/bin/sh
# Runs on a master (ansible.builtin.script): starts its components in order, first restarting the
# running ones named in RESTART (SIGTERM, SIGKILL after 30 s), and waits until each answers its health check before the next.
# Prints `restarted <name>` / `started <name>`; on a component that stays unhealthy, exits 1 with
# the end of its log.
#   components.sh DIR ADDRESS "name:port:path ..." "names to restart"
set -eu
cd "$HOME/${1#\~/}"
address=$2 components=$3 restart=$4

healthy() {
  /usr/bin/python3 -c 'import ssl, sys, urllib.request
try:
    ok = urllib.request.urlopen(sys.argv[1], timeout=3, context=ssl._create_unverified_context()).status == 200
except Exception:
    ok = False
sys.exit(0 if ok else 1)' "https://$address:$1$2"
}

for component in $components; do
  name=${component%%:*} rest=${component#*:}
  port=${rest%%:*} path=${rest#*:}
  pid=$(cat "$name.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    case " $restart " in
      *" $name "*)
        kill "$pid"
        for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then
          kill -9 "$pid"
          while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
        fi
        setsid "./$name.sh" >"$name.log" 2>&1 </dev/null &
        echo $! >"$name.pid"
        echo "restarted $name" ;;
    esac
  else
    setsid "./$name.sh" >"$name.log" 2>&1 </dev/null &
    echo $! >"$name.pid"
    echo "started $name"
  fi
  tries=0
  until healthy "$port" "$path"; do
    tries=$((tries + 1))
    if [ "$tries" -ge 90 ]; then
      echo "$name is not healthy on https://$address:$port$path after 180 s; the end of $name.log:" >&2
      tail -n 5 "$name.log" >&2
      exit 1
    fi
    sleep 2
  done
done
