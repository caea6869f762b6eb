//go:build tools

// Package tools records the commands built from this module: etcd and etcdctl.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
