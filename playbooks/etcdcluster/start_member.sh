setsid ./run.sh >etcd.log 2>&1 </dev/null &
echo $! >etcd.pid
