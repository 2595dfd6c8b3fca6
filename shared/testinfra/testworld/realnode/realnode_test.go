package realnode_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

func TestMain(m *testing.M) { worldtest.Main(m) }

// TestNode_PodRunsAndNothingIsLeft: a real node runs a pod whose container
// prints its own view of the network (eth0 from the CNI bridge), and Stop
// leaves nothing on the host: no process, mount, bridge, netns or path.
func TestNode_PodRunsAndNothingIsLeft(t *testing.T) {
	cp := worldtest.ControlPlane(t)
	c := cp.Client()
	ns := worldtest.Namespace(t, c)
	n := worldtest.Node(t, cp)

	pod, err := c.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			NodeName:                      n.Name(),
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "app", Image: realnode.TestAppImage, ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{{Name: "PING", Value: "127.0.0.1"}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var log string
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		log, err = n.ContainerLog(ns, pod.Name, pod.UID, "app", 0)
		return err == nil && strings.Contains(log, "testapp end 1"), err
	})
	if err != nil {
		t.Fatalf("the container's log: %v\n%s", err, log)
	}
	if !strings.Contains(log, ": eth0: <up") || !strings.Contains(log, "ping 127.0.0.1 ok") {
		t.Errorf("the container's own view has no eth0 up or no ping:\n%s", log)
	}
	netns, ok := n.Sandbox(pod.UID)
	if !ok {
		t.Fatal("no sandbox for the pod")
	}
	if out, err := exec.Command("ip", "-n", netns, "-br", "link", "show", "eth0").CombinedOutput(); err != nil {
		t.Errorf("eth0 in the sandbox netns %s: %v %s", netns, err, out)
	}

	dir := n.Dir()
	if err := n.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the node's directory %s is still there", dir)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), dir) {
		t.Errorf("mounts under %s are left", dir)
	}
	if err := exec.Command("ip", "link", "show", n.Bridge()).Run(); err == nil {
		t.Errorf("bridge %s is left", n.Bridge())
	}
	if _, err := os.Stat(filepath.Join("/var/run/netns", netns)); !os.IsNotExist(err) {
		t.Errorf("the pod's network namespace %s is left", netns)
	}
	if out, _ := exec.Command("pgrep", "-f", dir).Output(); len(out) > 0 {
		t.Errorf("processes of the node are left: %s", out)
	}
	_, err = c.CoreV1().Nodes().Get(context.Background(), n.Name(), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the Node object is left: %v", err)
	}
}

// TestNode_RequiredPluginRefusesContainers: with NRI's default validator
// on, the container of a pod that requires an NRI plugin which is not
// connected is refused (the kubelet retries), while a pod without the
// annotation runs: the mechanism netdra's fail-closed relies on when its nri
// plugin is down.
func TestNode_RequiredPluginRefusesContainers(t *testing.T) {
	cp := worldtest.ControlPlane(t)
	c := cp.Client()
	ns := worldtest.Namespace(t, c)
	n := worldtest.Node(t, cp)
	mk := func(name string, ann map[string]string) *corev1.Pod {
		pod, err := c.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
			Spec: corev1.PodSpec{NodeName: n.Name(), TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "app", Image: realnode.TestAppImage, ImagePullPolicy: corev1.PullNever}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	refused := mk("needs-netdra", map[string]string{realnode.RequiredPluginsAnnotation: `["netdra"]`})
	plain := mk("plain", nil)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, plain.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("the pod without the annotation does not run: %v", err)
	}
	var why string
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, refused.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		if w := p.Status.ContainerStatuses[0].State.Waiting; w != nil {
			why = w.Message
		}
		return strings.Contains(why, `required plugin "netdra" not present`), nil
	})
	if err != nil {
		t.Fatalf("the container of the pod requiring netdra was not refused for it: %v (waiting: %q)", err, why)
	}
	if p, _ := c.CoreV1().Pods(ns).Get(context.Background(), refused.Name, metav1.GetOptions{}); p.Status.Phase == corev1.PodRunning {
		t.Errorf("the pod requiring netdra runs without it")
	}
	t.Logf("refused: %s", why)
}
