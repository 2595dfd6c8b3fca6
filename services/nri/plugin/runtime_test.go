package plugin

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/ocihooks"
)

// runtime is the real NRI runtime side (what containerd embeds), in
// process, on a private socket.
type runtime struct {
	r      *adaptation.Adaptation
	synced chan struct{}
}

func startRuntime(t testing.TB, dir string) *runtime {
	t.Helper()
	rt, err := newRuntime(dir)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func newRuntime(dir string) (*runtime, error) {
	rt := &runtime{synced: make(chan struct{}, 8)}
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		rt.synced <- struct{}{}
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("test-runtime", "v0", sync, update,
		adaptation.WithSocketPath(filepath.Join(dir, "nri.sock")),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	if err != nil {
		return nil, err
	}
	if err := r.Start(); err != nil {
		return nil, err
	}
	<-rt.synced // Start syncs the (absent) pre-installed plugins once.
	rt.r = r
	return rt, nil
}

// waitPlugin waits until the plugin connected and was synchronized, and
// returns the runtime with plugin sync blocked, so events reach it.
func (rt *runtime) waitPlugin(t testing.TB) *adaptation.PluginSyncBlock {
	t.Helper()
	select {
	case <-rt.synced:
	case <-time.After(20 * time.Second):
		t.Fatal("the plugin never connected")
	}
	return rt.r.BlockPluginSync()
}

func shortDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "nri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func serve(t testing.TB, p *Plugin, dir string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = p.Serve(ctx, Connection{Socket: filepath.Join(dir, "nri.sock"), Name: "netdra", Index: "50"})
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// createContainer is the runtime creating a container of sb: its
// CreateContainer, then the createRuntime hooks of the adjustment, run as
// runc runs them (the OCI state on stdin); the error is the first failure
// and what the hook said.
func createContainer(ctx context.Context, rt *adaptation.Adaptation, sb *api.PodSandbox) error {
	resp, err := rt.CreateContainer(ctx, &adaptation.CreateContainerRequest{Pod: sb,
		Container: &api.Container{Id: "ctr-" + sb.GetUid(), PodSandboxId: sb.GetId(), Name: "app"}})
	if err != nil {
		return err
	}
	return ocihooks.Run(ctx, resp.GetAdjust().GetHooks().GetCreateRuntime())
}

// TestRuntime_FailClosed drives the plugin through the real NRI runtime
// side: RunPodSandbox starts the attach, and the container waits for it in
// CreateContainer; a failing attach refuses the runtime's container, so
// the pod would not run; StopPodSandbox starts the detach.
func TestRuntime_FailClosed(t *testing.T) {
	dir := shortDir(t)
	w := newWorld(alloc("a", "pod1", prepared), alloc("b", "pod2", prepared))
	w.failAttach["b"] = fmt.Errorf("no such device")
	p := newPlugin(t, w)
	rt := startRuntime(t, dir)
	defer rt.r.Stop()
	serve(t, p, dir)
	blk := rt.waitPlugin(t)
	defer blk.Unblock()
	ctx := context.Background()

	for _, sb := range []*api.PodSandbox{pod("pod1", "/var/run/netns/p1"), pod("pod2", "/var/run/netns/p2")} {
		if err := rt.r.RunPodSandbox(ctx, &adaptation.RunPodSandboxRequest{Pod: sb}); err != nil {
			t.Fatalf("RunPodSandbox: %v", err)
		}
	}
	if err := createContainer(ctx, rt.r, pod("pod1", "/var/run/netns/p1")); err != nil {
		t.Fatalf("the container of pod1: %v", err)
	}
	if w.where["a"] != "/var/run/netns/p1" {
		t.Errorf("device a is in %q", w.where["a"])
	}
	err := createContainer(ctx, rt.r, pod("pod2", "/var/run/netns/p2"))
	if err == nil || !strings.Contains(err.Error(), "no such device") {
		t.Fatalf("the container of a pod whose device fails = %v, want the failure", err)
	}
	if err := rt.r.StopPodSandbox(ctx, &adaptation.StopPodSandboxRequest{Pod: pod("pod1", "/var/run/netns/p1")}); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if w.where["a"] != "" {
		t.Errorf("device a is still in %q after stop", w.where["a"])
	}
}

// runtimeEnv makes the test binary a runtime process: the NRI runtime side
// on <dir>/nri.sock, reading "run <uid> <netns>" lines on stdin and
// answering "ok" or "error: ..." on stdout.
const runtimeEnv = "NETDRA_TEST_NRI_RUNTIME"

func TestMain(m *testing.M) {
	if dir := os.Getenv(runtimeEnv); dir != "" {
		runtimeProcess(dir)
		return
	}
	nodetest.Main(m)
}

func runtimeProcess(dir string) {
	rt, err := newRuntime(dir)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	<-rt.synced
	blk := rt.r.BlockPluginSync()
	defer blk.Unblock()
	fmt.Println("synced")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var uid, netns string
		fmt.Sscanf(in.Text(), "run %s %s", &uid, &netns)
		if err := rt.r.RunPodSandbox(context.Background(), &adaptation.RunPodSandboxRequest{Pod: pod(uid, netns)}); err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println("ok")
	}
}

type runtimeProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startRuntimeProcess(t *testing.T, dir string) *runtimeProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runtimeEnv+"="+dir)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rp := &runtimeProc{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(rp.kill)
	if line := rp.line(t); line != "synced" {
		t.Fatalf("runtime process said %q, want synced", line)
	}
	return rp
}

func (rp *runtimeProc) line(t *testing.T) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		if rp.out.Scan() {
			got <- rp.out.Text()
		}
		close(got)
	}()
	select {
	case l := <-got:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("the runtime process said nothing")
	}
	return ""
}

func (rp *runtimeProc) kill() {
	_ = rp.cmd.Process.Kill()
	_ = rp.cmd.Wait()
}

// TestRuntime_Reconnect: the runtime process dies (kill -9, as a crashed or
// restarted containerd) and comes back; the plugin reconnects by itself and
// handles the next sandbox.
func TestRuntime_Reconnect(t *testing.T) {
	dir := shortDir(t)
	w := newWorld(alloc("a", "pod1", prepared))
	p := newPlugin(t, w)
	serve(t, p, dir)
	for i, netns := range []string{"/var/run/netns/first", "/var/run/netns/second"} {
		rp := startRuntimeProcess(t, dir)
		fmt.Fprintf(rp.in, "run pod1 %s\n", netns)
		if got := rp.line(t); got != "ok" {
			t.Fatalf("runtime %d: RunPodSandbox said %q", i, got)
		}
		p.Wait()
		if w.where["a"] != netns {
			t.Errorf("runtime %d: device a is in %q, want %s", i, w.where["a"], netns)
		}
		rp.kill()
		os.Remove(filepath.Join(dir, "nri.sock"))
	}
}

// BenchmarkNRI_RunPodSandbox measures a pod's hooks through the real NRI
// runtime side, with the state service and the provisioner faked: the
// sandbox started, its container created (CreateContainer waits for the
// attach: no gate hook), the sandbox stopped and its detach ended; what
// netdra adds to a pod's life, for 1 and 8 devices.
func BenchmarkNRI_RunPodSandbox(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			var allocs []*statev1.Allocation
			for i := range n {
				allocs = append(allocs, alloc(fmt.Sprintf("dev%d", i), "pod1", prepared))
			}
			w := newWorld(allocs...)
			p := New(slog.New(slog.DiscardHandler), fakeState{w: w}, fakeProvisioner{w: w}, nil)
			dir := shortDir(b)
			rt := startRuntime(b, dir)
			defer rt.r.Stop()
			serve(b, p, dir)
			blk := rt.waitPlugin(b)
			defer blk.Unblock()
			ctx := context.Background()
			sb := pod("pod1", "/var/run/netns/p1")
			for b.Loop() {
				if err := rt.r.RunPodSandbox(ctx, &adaptation.RunPodSandboxRequest{Pod: sb}); err != nil {
					b.Fatal(err)
				}
				if err := createContainer(ctx, rt.r, sb); err != nil {
					b.Fatal(err)
				}
				if err := rt.r.StopPodSandbox(ctx, &adaptation.StopPodSandboxRequest{Pod: sb}); err != nil {
					b.Fatal(err)
				}
				p.Wait()
				w.takeCalls()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "hook-us")
		})
	}
}

var _ = api.PodSandbox{}
