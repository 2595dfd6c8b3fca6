package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/rpc"
)

// The tests run the state service as a real process: the test binary
// re-executes itself as `state` when this variable is set.
const runStateEnv = "NETDRA_TEST_RUN_STATE"

func TestMain(m *testing.M) {
	if os.Getenv(runStateEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// stateProc is one run of the state service on a socket and a file.
type stateProc struct {
	t        *testing.T
	sock, db string
	cmd      *exec.Cmd
	exited   chan struct{}
}

// newDirs returns a short socket path (unix sockets take 108 bytes) and a
// database path, both removed at the end of the test.
func newDirs(t *testing.T) (sock, db string) {
	dir, err := os.MkdirTemp("", "nd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "state.sock"), filepath.Join(t.TempDir(), "state.db")
}

// startState starts the service and waits until its health says SERVING.
// It serves no metrics unless args (flags after the others) say where.
func startState(t *testing.T, sock, db string, args ...string) *stateProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-socket", sock, "-db", db, "-log-level", "warn", "-metrics-address="}, args...)...)
	cmd.Env = append(os.Environ(), runStateEnv+"=1")
	cmd.Stderr = logWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &stateProc{t: t, sock: sock, db: db, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(p.kill)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rpc.CheckHealth(ctx, sock, "")
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("state exited before serving: %v", cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("state not serving on %s: %v", sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL: no clean-up runs in the service.
func (p *stateProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGTERM and requires a clean exit.
func (p *stateProc) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		p.t.Fatal("state did not stop on SIGTERM")
	}
	if !p.cmd.ProcessState.Success() {
		p.t.Fatalf("state exited with %v", p.cmd.ProcessState)
	}
}

func dialState(t *testing.T, sock string) (statev1.StateServiceClient, *grpc.ClientConn) {
	t.Helper()
	conn, err := rpc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return statev1.NewStateServiceClient(conn), conn
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
