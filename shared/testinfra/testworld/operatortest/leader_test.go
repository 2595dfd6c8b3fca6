package operatortest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/services/operator/controller"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// Two replicas: one holds the Lease and reconciles, the other waits; when
// the leader stops it releases the Lease and the other takes over.
func TestOperator_TwoReplicasLeaderElection(t *testing.T) {
	w := newWorld(t)
	ns := worldtest.Namespace(t, worldtest.ControlPlane(t).Client())
	opts := controller.Options{
		Refresh: time.Minute, MetricsAddr: "0",
		LeaderElection: true, LeaderElectionNamespace: ns, LeaderElectionID: "netdra-operator",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}
	type replica struct {
		elected <-chan struct{}
		cancel  context.CancelFunc
		done    chan error
	}
	start := func(name string) *replica {
		mgr, err := controller.NewManager(worldtest.Logger(t).With("replica", name), w.rc, opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{elected: mgr.Elected(), cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- mgr.Start(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-r.done; err != nil {
				t.Errorf("replica %s: %v", name, err)
			}
		})
		return r
	}
	w.node("n1")
	w.clusterConfig("all", nil, spec("all.example.com"))
	a, b := start("a"), start("b")

	var leader, follower *replica
	select {
	case <-a.elected:
		leader, follower = a, b
	case <-b.elected:
		leader, follower = b, a
	case <-time.After(deadline):
		t.Fatal("no replica was elected")
	}
	w.governed("n1", "all")
	w.node("n2")
	w.governed("n2", "all")
	select {
	case <-follower.elected:
		t.Fatal("both replicas are leaders")
	default:
	}
	holder := leaseHolder(t, w, ns)
	if holder == "" {
		t.Fatal("the Lease has no holder")
	}

	leader.cancel()
	if err := <-leader.done; err != nil {
		t.Fatalf("the leader stopped with %v", err)
	}
	leader.done <- nil // for its cleanup
	select {
	case <-follower.elected:
	case <-time.After(deadline):
		t.Fatal("the follower did not take over")
	}
	if h := leaseHolder(t, w, ns); h == holder || h == "" {
		t.Errorf("the Lease is held by %q, was %q", h, holder)
	}
	w.node("n3")
	w.governed("n3", "all")
	w.status("all", 3, "False")
}

func leaseHolder(t *testing.T, w *world, ns string) string {
	t.Helper()
	var l coordinationv1.Lease
	var holder string
	w.eventually("the Lease", func(ctx context.Context) error {
		got, err := worldtest.ControlPlane(t).Client().CoordinationV1().Leases(ns).Get(ctx, "netdra-operator", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l = *got
		if l.Spec.HolderIdentity == nil {
			return fmt.Errorf("no holder")
		}
		holder = *l.Spec.HolderIdentity
		return nil
	})
	return holder
}

// The operator binary, as a Deployment runs it: flags, a kubeconfig,
// leader election, health endpoints; SIGTERM stops it cleanly and frees
// the Lease.
func TestOperator_Binary(t *testing.T) {
	w := newWorld(t)
	cp := worldtest.ControlPlane(t)
	ns := worldtest.Namespace(t, cp.Client())
	bin := filepath.Join(t.TempDir(), "operator")
	build := exec.Command("go", "build", "-tags", nodetest.BuildTags, "-o", bin, "./services/operator")
	// In the product's module: its go.sum has the binary's dependencies,
	// the test world's (tidy) only those its own packages import.
	build.Dir = "../../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	health := testenv.FreeAddr(t)
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "-kubeconfig", cp.Kubeconfig(), "-refresh", "1m",
		"-leader-election-namespace", ns, "-metrics-addr", "0", "-health-addr", health)
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("operator log:\n%s", b)
		}
	})

	w.eventually("/readyz", func(ctx context.Context) error {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})
	w.node("n1")
	w.clusterConfig("all", nil, spec("all.example.com"))
	w.governed("n1", "all")
	if leaseHolder(t, w, ns) == "" {
		t.Fatal("no Lease holder")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("the operator exited with %v on SIGTERM, want 0", err)
		}
	case <-time.After(deadline):
		t.Fatal("the operator did not exit on SIGTERM")
	}
	l, err := cp.Client().CoordinationV1().Leases(ns).Get(context.Background(), "netdra-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("the Lease is still held by %q after a clean stop", *h)
	}
}
