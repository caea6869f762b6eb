// Command cri-reset stops and removes every Pod sandbox, with its containers, of a CRI runtime
// through the CRI itself, so the runtime tears down each Pod's network (CNI DEL) and unmounts its
// root filesystems. hack/local-cluster.sh down runs it on the local node's containerd after
// stopping the kubelet (no crictl can be installed here: cri-tools is not on the module proxy).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", "", "path of the CRI runtime's unix socket")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	flag.Parse()
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "cri-reset: -endpoint is required")
		os.Exit(2)
	}
	if err := reset(*endpoint, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "cri-reset: %v\n", err)
		os.Exit(1)
	}
}

func reset(endpoint string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	defer conn.Close()
	client := runtime.NewRuntimeServiceClient(conn)
	sandboxes, err := client.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	failed := 0
	for _, sandbox := range sandboxes.Items {
		name := sandbox.Id
		if meta := sandbox.Metadata; meta != nil {
			name = meta.Namespace + "/" + meta.Name
		}
		if _, err := client.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: sandbox.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "cri-reset: stop pod sandbox %s: %v\n", name, err)
			failed++
			continue
		}
		if _, err := client.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: sandbox.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "cri-reset: remove pod sandbox %s: %v\n", name, err)
			failed++
			continue
		}
		fmt.Printf("cri-reset: removed pod %s\n", name)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d pod sandboxes not removed", failed, len(sandboxes.Items))
	}
	return nil
}
