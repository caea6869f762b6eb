//go:build tools

// Package tools records the control-plane commands built from this module.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "go.etcd.io/etcd/etcdctl/v3/ctlv3"
	_ "go.etcd.io/etcd/etcdutl/v3/etcdutl"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
	_ "k8s.io/kubectl/pkg/cmd"
)
