// Package worldtest sets test worlds up from Go tests: one control plane
// for a whole test binary (Main and ControlPlane), a node per test (Node),
// a namespace per test (Namespace), short temporary directories for unix
// sockets (TempDir) and a slog logger writing through t.Log (Logger).
//
// A test binary using it:
//
//	func TestMain(m *testing.M) { worldtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		cp := worldtest.ControlPlane(t)
//		n := worldtest.Node(t, cp)
//		ns := worldtest.Namespace(t, cp.Client())
//		...
//	}
//
// Environment: TESTWORLD_BIN (a prebuilt testworld binary, else one is
// built with go install, see controlplane.Binary) and TESTWORLD_LOG
// (debug, info, warn or error; default info).
package worldtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
)

var (
	sharedMu sync.Mutex
	shared   *controlplane.ControlPlane
	inMain   bool
)

// Main runs the tests of a package with one control plane for all of them,
// started by the first ControlPlane call and stopped after the last test,
// and then removes the binaries nodetest.Binaries built.
// It routes the global klog logger to stderr at warning level and up, and
// exits.
func Main(m *testing.M) {
	klog.SetSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	sharedMu.Lock()
	inMain = true
	sharedMu.Unlock()
	code := m.Run()
	sharedMu.Lock()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "worldtest: stopping the control plane: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		os.RemoveAll(sharedDir)
	}
	sharedMu.Unlock()
	nodetest.RemoveBinaries()
	os.Exit(code)
}

var sharedDir string

// ControlPlane returns the test binary's control plane, started on first
// use, when the package's TestMain calls Main; otherwise it starts one for
// this test alone and stops it at the test's end.
func ControlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if !inMain {
		return NewControlPlane(t)
	}
	if shared != nil {
		select {
		case <-shared.Exited():
			t.Fatalf("the shared control plane exited; see %s", shared.LogPath())
		default:
		}
		return shared
	}
	dir, err := os.MkdirTemp("", "tw-cp-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // includes a cold build
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir, Logger: slog.New(newStderrHandler()), PodAccess: podAccess()})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("starting the control plane: %v", err)
	}
	shared, sharedDir = cp, dir
	return cp
}

// NewControlPlane starts a control plane for this test alone.
func NewControlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), Logger: Logger(t), PodAccess: podAccess()})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	return cp
}

// podAccess says whether the control plane makes the kubernetes Service
// answer for pods (controlplane.Options.PodAccess): as root, where real
// nodes run.
func podAccess() bool { return os.Geteuid() == 0 }

// NodeOption changes the realnode.Config that Node uses.
type NodeOption func(*realnode.Config)

// WithLabels adds labels to the Node.
func WithLabels(l map[string]string) NodeOption {
	return func(c *realnode.Config) { c.Labels = l }
}

// WithRuntime runs the node's pods on rt (realnode.CRIO builds CRI-O's
// programs first: minutes the first time on a machine).
func WithRuntime(rt realnode.Runtime) NodeOption {
	return func(c *realnode.Config) { c.Runtime = rt }
}

var (
	crioOnce sync.Once
	crioBins *realnode.Binaries
	crioErr  error
)

// crioBinaries returns b completed with CRI-O's programs, built once per
// test binary.
func crioBinaries(t testing.TB, b *realnode.Binaries) *realnode.Binaries {
	t.Helper()
	crioOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		c := *b
		crioErr = realnode.BuildCRIO(ctx, slog.New(newStderrHandler()), &c)
		crioBins = &c
	})
	if crioErr != nil {
		t.Fatalf("building CRI-O for the real node: %v", crioErr)
	}
	return crioBins
}

var (
	binOnce sync.Once
	bins    *realnode.Binaries
	binErr  error
)

// Binaries returns the real node's programs, built once per test binary
// (minutes the first time on a machine, seconds after: see realnode.Build).
func Binaries(t testing.TB) *realnode.Binaries {
	t.Helper()
	binOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		bins, binErr = realnode.Build(ctx, slog.New(newStderrHandler()))
	})
	if binErr != nil {
		t.Fatalf("building the real node: %v", binErr)
	}
	return bins
}

// Node starts a real node for this test — a real kubelet and containerd
// (or CRI-O: WithRuntime) with NRI, runc and the CNI plugins, named after
// the test — against cp.
// At the test's end its pods are deleted, the node is stopped and
// everything it made is removed, the Node object included. It needs root
// test when not run as root.
func Node(t testing.TB, cp *controlplane.ControlPlane, opts ...NodeOption) *realnode.Node {
	t.Helper()
	testenv.RequireRoot(t, "the real node runs containerd and the kubelet")
	b := Binaries(t)
	dir, err := os.MkdirTemp("", "rn-")
	if err != nil {
		t.Fatal(err)
	}
	name := NodeName(t)
	cfg := realnode.Config{
		Name:       name,
		Dir:        dir,
		Kubeconfig: cp.Kubeconfig(),
		Client:     cp.Client(),
		Binaries:   b,
		Logger:     Logger(t),
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Runtime == realnode.CRIO {
		cfg.Binaries = crioBinaries(t, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, err := realnode.Start(ctx, cfg)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("starting node %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet log of %s (tail):\n%s", name, realnode.Tail(n.LogPath("kubelet"), 6000))
			if n.Runtime() == realnode.CRIO {
				t.Logf("crio log of %s (tail):\n%s", name, realnode.Tail(n.LogPath("crio"), 6000))
			}
		}
		if err := n.Stop(); err != nil {
			t.Errorf("stopping node %s: %v", name, err)
		}
	})
	return n
}

// NodeName is a node name derived from the test's name, unique per call.
func NodeName(t testing.TB) string {
	return dnsLabel(t.Name(), 40) + "-" + randomSuffix()
}

// Namespace creates a namespace for this test, waits for its default
// ServiceAccount (without which no pod is admitted) and deletes it at the
// test's end.
func Namespace(t testing.TB, client kubernetes.Interface) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: dnsLabel(t.Name(), 40) + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	})
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s has no default ServiceAccount: %v", ns.Name, err)
	}
	return ns.Name
}

// TempDir is a fresh directory under /tmp with a short path, for unix
// sockets (108 bytes at most); t.TempDir paths grow with the test's name.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tw-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Logger returns a logger writing through t.Log, at the level of
// $TESTWORLD_LOG (default info). Lines logged after the test ended are
// dropped instead of panicking.
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level()}))
}

type testWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func level() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("TESTWORLD_LOG"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

func newStderrHandler() slog.Handler {
	return slog.NewTextHandler(io.Writer(os.Stderr), &slog.HandlerOptions{Level: level()})
}

// dnsLabel turns s into a lower-case DNS label of at most max characters.
func dnsLabel(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > max {
		out = strings.TrimRight(out[:max], "-")
	}
	if out == "" {
		out = "t"
	}
	return out
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
