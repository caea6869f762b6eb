test -f etcd.pid && kill -0 "$(cat etcd.pid)" 2>/dev/null
