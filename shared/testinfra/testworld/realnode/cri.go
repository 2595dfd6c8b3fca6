package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// withCRI calls f with a CRI runtime client of the runtime (containerd or
// CRI-O) on socket.
func withCRI(ctx context.Context, socket string, f func(runtimeapi.RuntimeServiceClient) error) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(runtimeapi.NewRuntimeServiceClient(conn))
}

// Sandbox reports the network namespace of the pod's ready sandbox, as
// containerd made it: its name under /var/run/netns (for ip -n). ok is
// false when containerd's answer is not one ready sandbox with a named
// netns, or when it gives none for 30 s: while containerd restarts (the
// chaos test kills it) and its socket is Unavailable, Sandbox asks again,
// so that a runtime briefly down is not taken for a sandbox lost.
func (n *Node) Sandbox(podUID types.UID) (netns string, ok bool) {
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		netns, err = SandboxNetns(ctx, n.CRISocket(), podUID)
		if status.Code(err) == codes.Unavailable {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return "", false
	}
	n.record(netns)
	return netns, true
}

// SandboxNetns asks containerd, through the CRI on its socket, for the
// network namespace of the pod's ready sandbox: its name under
// /var/run/netns (containerd names them cni-<uuid>, CRI-O <uuid>). The
// socket may be CRI-O's too.
func SandboxNetns(ctx context.Context, containerdSocket string, podUID types.UID) (string, error) {
	var netns string
	err := withCRI(ctx, containerdSocket, func(c runtimeapi.RuntimeServiceClient) error {
		resp, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(podUID)},
		}})
		if err != nil {
			return fmt.Errorf("listing the pod's sandboxes from containerd: %w", err)
		}
		if len(resp.GetItems()) != 1 {
			return fmt.Errorf("containerd has %d ready sandboxes of pod %s, want 1", len(resp.GetItems()), podUID)
		}
		netns, err = sandboxNetns(ctx, c, resp.Items[0].Id)
		return err
	})
	return netns, err
}

func sandboxNetns(ctx context.Context, c runtimeapi.RuntimeServiceClient, id string) (string, error) {
	st, err := c.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return "", fmt.Errorf("the sandbox's status from containerd: %w", err)
	}
	return netnsOfSandbox(st.GetInfo()["info"])
}

// netnsOfSandbox reads the network namespace's name from the verbose
// sandbox info of containerd or CRI-O (both give the OCI runtime spec they
// made for the sandbox as "runtimeSpec").
func netnsOfSandbox(info string) (string, error) {
	var v struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		}
	}
	if err := json.Unmarshal([]byte(info), &v); err != nil {
		return "", fmt.Errorf("containerd's sandbox info: %w", err)
	}
	for _, ns := range v.RuntimeSpec.Linux.Namespaces {
		if ns.Type != "network" {
			continue
		}
		name := filepath.Base(ns.Path)
		if dir := filepath.Dir(ns.Path); (dir != "/var/run/netns" && dir != "/run/netns") || !netnsName.MatchString(name) {
			return "", fmt.Errorf("the pod's network namespace %q is not a named one under /var/run/netns", ns.Path)
		}
		return name, nil
	}
	return "", errors.New("the pod's sandbox has no network namespace of its own")
}

var netnsName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

func (n *Node) record(netns string) {
	n.mu.Lock()
	n.netns[netns] = true
	n.mu.Unlock()
}

// recordSandboxes notes the netns of every sandbox containerd has, so that
// Stop can remove those it leaves.
func (n *Node) recordSandboxes(ctx context.Context) {
	_ = withCRI(ctx, n.CRISocket(), func(c runtimeapi.RuntimeServiceClient) error {
		resp, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return err
		}
		for _, sb := range resp.Items {
			if netns, err := sandboxNetns(ctx, c, sb.Id); err == nil {
				n.record(netns)
			}
		}
		return nil
	})
}

// Exec runs a command inside a running container of a pod on this node, as
// `kubectl exec` would (CRI ExecSync), and returns its output and exit
// code. err is about reaching the container, not the command's status.
func (n *Node) Exec(ctx context.Context, podUID types.UID, container string, cmd ...string) (out string, exitCode int32, err error) {
	err = withCRI(ctx, n.CRISocket(), func(c runtimeapi.RuntimeServiceClient) error {
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

// PodTimes is when containerd made a pod's sandbox and one of its
// containers, and when that container started, as the CRI reports them
// (the runtime's clock, this host's): the stages of a pod's start on the
// node between the kubelet's first sight of it and its Ready condition.
type PodTimes struct {
	SandboxCreated, ContainerCreated, ContainerStarted time.Time
}

// PodTimes asks containerd, through the CRI, for the times of the pod's
// sandbox and of its container named container.
func (n *Node) PodTimes(ctx context.Context, podUID types.UID, container string) (PodTimes, error) {
	var t PodTimes
	err := withCRI(ctx, n.CRISocket(), func(c runtimeapi.RuntimeServiceClient) error {
		sbs, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(podUID)},
		}})
		if err != nil {
			return fmt.Errorf("listing the pod's sandboxes from containerd: %w", err)
		}
		if len(sbs.GetItems()) != 1 {
			return fmt.Errorf("containerd has %d sandboxes of pod %s, want 1", len(sbs.GetItems()), podUID)
		}
		t.SandboxCreated = time.Unix(0, sbs.Items[0].CreatedAt)
		cs, err := c.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(podUID), "io.kubernetes.container.name": container},
		}})
		if err != nil {
			return fmt.Errorf("listing the pod's containers from containerd: %w", err)
		}
		if len(cs.GetContainers()) != 1 {
			return fmt.Errorf("containerd has %d containers %s of pod %s, want 1", len(cs.GetContainers()), container, podUID)
		}
		st, err := c.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cs.Containers[0].Id})
		if err != nil {
			return fmt.Errorf("the container's status from containerd: %w", err)
		}
		t.ContainerCreated, t.ContainerStarted = time.Unix(0, st.GetStatus().GetCreatedAt()), time.Unix(0, st.GetStatus().GetStartedAt())
		return nil
	})
	return t, err
}
