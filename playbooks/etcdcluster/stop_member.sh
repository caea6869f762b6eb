if test -f etcd.pid && kill -0 "$(cat etcd.pid)" 2>/dev/null; then
  pid=$(cat etcd.pid); kill "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  echo stopped
fi
rm -f etcd.pid
