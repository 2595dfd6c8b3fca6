package plugin

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/process"
	"github.com/netdra/netdra/shared/rpc"
)

// serveOn serves a gRPC service on socket with rpc.NewServer, as the node
// processes serve theirs, and returns its stop, also run at the end of
// the test.
func serveOn(t *testing.T, socket string, register func(*grpc.Server)) (stop func()) {
	t.Helper()
	srv := rpc.NewServer(rpc.ServerConfig{SocketPath: socket, Logger: slog.New(slog.DiscardHandler), StopTimeout: time.Second})
	register(srv.GRPC())
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	if err := waitHealthy(socket); err != nil {
		srv.Stop()
		t.Fatalf("%s: %v (Serve: %v)", socket, err, <-done)
	}
	stop = sync.OnceFunc(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", socket, err)
		}
	})
	t.Cleanup(stop)
	return stop
}

func waitHealthy(socket string) error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = rpc.CheckHealth(ctx, socket, "")
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

// TestStatus_WaitingFor: nri's Status, asked on its admin socket, names
// what the plugin waits for, with nri's wiring of its peers (process.Peers
// dialled and watched as nri's main does, over real unix sockets): the
// state service and the provisioner while their sockets serve nothing,
// with the dial's reason, once the watch's grace has passed; the
// runtime's NRI socket until the runtime has synchronized the plugin. Each
// line goes once its dependency serves, and comes back when it goes away.
func TestStatus_WaitingFor(t *testing.T) {
	dir := shortDir(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	peers := process.Peers{StateSocket: filepath.Join(dir, "state.sock"), ProvisionerSock: filepath.Join(dir, "provisioner.sock")}
	state, prov, closeConns, err := peers.Dial(rpc.RetryUnavailable(RetriedMethods...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeConns)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watch := peers.Watch(ctx, log, state, prov)
	p := New(log, statev1.NewStateServiceClient(state), provisionerv1.NewProvisionerServiceClient(prov), prometheus.NewRegistry())
	t.Cleanup(p.Wait)
	p.SetWaiting(watch.Waiting)

	admin := filepath.Join(dir, "nri.sock")
	serveOn(t, admin, func(g *grpc.Server) { nriv1.RegisterNriServiceServer(g, p.Service()) })
	cc, err := rpc.Dial(admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	status := func() *nriv1.StatusResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := nriv1.NewNriServiceClient(cc).Status(ctx, &nriv1.StatusRequest{})
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		return st
	}
	// waitFor waits until Status's waitingFor passes checkWaiting.
	start := time.Now()
	waitFor := func(what string, want [][]string, gone []string) *nriv1.StatusResponse {
		t.Helper()
		var st *nriv1.StatusResponse
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st = status()
			err := checkWaiting(st.GetWaitingFor(), want, gone)
			if err == nil {
				t.Logf("%s after %v: %q", what, time.Since(start).Round(10*time.Millisecond), st.GetWaitingFor())
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, err)
			}
		}
	}
	stateLine, provLine := "state service ("+peers.StateSocket+")", "provisioner ("+peers.ProvisionerSock+")"

	// Nothing serves, and the plugin has not dialled the runtime yet.
	st := waitFor("no peer, no runtime", [][]string{
		{stateLine, "no such file"},
		{provLine, "no such file"},
		{"the container runtime's NRI socket (not dialled yet)"},
	}, nil)
	if st.GetConnected() {
		t.Errorf("connected before Serve")
	}

	stopState := serveOn(t, peers.StateSocket, func(g *grpc.Server) {
		statev1.RegisterStateServiceServer(g, stateServer{f: fakeState{w: newWorld()}})
	})
	waitFor("the state service up", [][]string{{provLine, "no such file"}}, []string{stateLine})

	serveOn(t, peers.ProvisionerSock, func(g *grpc.Server) {
		provisionerv1.RegisterProvisionerServiceServer(g, provisionerServer{f: fakeProvisioner{w: newWorld()}})
	})
	rtDir := shortDir(t)
	serve(t, p, rtDir)
	nriSock := filepath.Join(rtDir, "nri.sock")
	waitFor("both peers up, no runtime", [][]string{{"the container runtime's NRI socket " + nriSock}}, []string{stateLine, provLine, "not dialled yet"})

	// The runtime in a process of its own, which synchronizes the plugin.
	rp := startRuntimeProcess(t, rtDir)
	st = waitFor("everything up", nil, []string{stateLine, provLine, "NRI socket"})
	if len(st.GetWaitingFor()) != 0 || !st.GetConnected() || st.GetRuntimeSocket() != nriSock {
		t.Errorf("everything up: waitingFor %q, connected %v, runtime socket %q", st.GetWaitingFor(), st.GetConnected(), st.GetRuntimeSocket())
	}

	// The state service goes away: its socket is removed with it.
	stopState()
	waitFor("the state service gone", [][]string{{stateLine, "no such file"}}, []string{provLine, "NRI socket"})
	// The runtime dies (kill -9, as a crashed containerd).
	rp.kill()
	st = waitFor("the runtime gone", [][]string{{stateLine}, {"the container runtime's NRI socket " + nriSock}}, []string{provLine})
	if st.GetConnected() {
		t.Errorf("connected after the runtime died")
	}
}

// checkWaiting says how lines fail to hold, for each of want, a line that
// contains all of its strings, or hold a line that contains one of gone.
func checkWaiting(lines []string, want [][]string, gone []string) error {
	for _, w := range want {
		if !slices.ContainsFunc(lines, func(l string) bool {
			return !slices.ContainsFunc(w, func(s string) bool { return !strings.Contains(l, s) })
		}) {
			return fmt.Errorf("waitingFor %q has no line with %q", lines, w)
		}
	}
	for _, g := range gone {
		if slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, g) }) {
			return fmt.Errorf("waitingFor %q still names %q", lines, g)
		}
	}
	return nil
}
