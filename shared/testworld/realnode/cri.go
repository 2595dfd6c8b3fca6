package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// withCRI calls f with a CRI runtime client of the node's containerd.
func (n *Node) withCRI(ctx context.Context, f func(runtimeapi.RuntimeServiceClient) error) error {
	conn, err := grpc.NewClient("unix://"+n.ContainerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(runtimeapi.NewRuntimeServiceClient(conn))
}

// Sandbox reports the network namespace of the pod's ready sandbox, as
// containerd made it: its name under /var/run/netns (for ip -n). ok is
// false while the pod has no ready sandbox.
func (n *Node) Sandbox(podUID types.UID) (netns string, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.withCRI(ctx, func(c runtimeapi.RuntimeServiceClient) error {
		resp, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(podUID)},
		}})
		if err != nil || len(resp.Items) == 0 {
			return err
		}
		netns, ok = n.sandboxNetns(ctx, c, resp.Items[0].Id)
		return nil
	})
	return netns, ok
}

// sandboxNetns reads the netns path from the sandbox's verbose status (the
// OCI runtime spec containerd keeps for it) and records it for Stop.
func (n *Node) sandboxNetns(ctx context.Context, c runtimeapi.RuntimeServiceClient, id string) (string, bool) {
	st, err := c.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return "", false
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		}
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		return "", false
	}
	for _, ns := range info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			name := ns.Path
			if strings.HasPrefix(ns.Path, "/var/run/netns/") || strings.HasPrefix(ns.Path, "/run/netns/") {
				name = filepath.Base(ns.Path)
			}
			n.mu.Lock()
			n.netns[name] = true
			n.mu.Unlock()
			return name, true
		}
	}
	return "", false // host network
}

// recordSandboxes notes the netns of every sandbox containerd has, so that
// Stop can remove those it leaves.
func (n *Node) recordSandboxes(ctx context.Context) {
	_ = n.withCRI(ctx, func(c runtimeapi.RuntimeServiceClient) error {
		resp, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		for _, sb := range resp.Items {
			n.sandboxNetns(ctx, c, sb.Id)
		}
		return nil
	})
}

// Exec runs a command inside a running container of a pod on this node, as
// `kubectl exec` would (CRI ExecSync), and returns its output and exit
// code. err is about reaching the container, not the command's status.
func (n *Node) Exec(ctx context.Context, podUID types.UID, container string, cmd ...string) (out string, exitCode int32, err error) {
	err = n.withCRI(ctx, func(c runtimeapi.RuntimeServiceClient) error {
		resp, err := c.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(podUID), "io.kubernetes.container.name": container},
		}})
		if err != nil {
			return err
		}
		if len(resp.Containers) == 0 {
			return fmt.Errorf("no running container %s in pod %s", container, podUID)
		}
		r, err := c.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: resp.Containers[0].Id, Cmd: cmd, Timeout: 30})
		if err != nil {
			return err
		}
		out, exitCode = string(r.Stdout)+string(r.Stderr), r.ExitCode
		return nil
	})
	return out, exitCode, err
}
