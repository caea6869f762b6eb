for c in kube-scheduler kube-controller-manager kube-apiserver; do
  if test -f $c.pid && kill -0 "$(cat $c.pid)" 2>/dev/null; then
    pid=$(cat $c.pid); kill "$pid"
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done; fi
    echo "stopped $c"
  fi
  rm -f $c.pid
done
