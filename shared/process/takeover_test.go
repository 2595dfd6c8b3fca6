package process

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// instance is a node process named x parsed from args, standing by as
// mainWith does (not mainWith itself, which routes grpc's global logger:
// grpc's goroutines of other tests would race with it), its run reporting
// on started and ending once stop closes.
type instance struct {
	started chan struct{}
	stop    chan struct{}
	done    chan error
	log     *testenv.Buffer
}

func startInstance(t *testing.T, args ...string) *instance {
	t.Helper()
	in := &instance{started: make(chan struct{}), stop: make(chan struct{}), done: make(chan error, 1), log: &testenv.Buffer{}}
	var f Flags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Register(fs, "x")
	if code, ok := ParseArgs(fs, args, io.Discard); !ok {
		t.Fatalf("flags %q: exit code %d", args, code)
	}
	log := NewLogger(in.log, slog.LevelInfo, LogText)
	go func() {
		release, err := f.TakeOver.StandBy(context.Background(), log, f.ServerConfig(log))
		if err != nil {
			in.done <- err
			return
		}
		close(in.started)
		<-in.stop
		release()
		in.done <- nil
	}()
	t.Cleanup(func() {
		select {
		case <-in.stop:
		default:
			close(in.stop)
		}
	})
	return in
}

// waitUntil polls cond until it holds or a generous deadline passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "to")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestTakeOver_StandsByForTheLock: a second instance given a lock the
// first holds does not run; its socket answers its health check (the
// readiness probe passes) but not CheckActive, and every other call fails
// with Unavailable naming the lock; it logs why it waits. Once the first
// lets go, it runs, holding the lock, and lets go of it when it exits.
func TestTakeOver_StandsByForTheLock(t *testing.T) {
	dir := shortDir(t)
	lock, sock := filepath.Join(dir, "x.lock"), filepath.Join(dir, "x.sock")
	first, err := tryLock(lock)
	if err != nil || first == nil {
		t.Fatalf("first lock: %v %v", first, err)
	}
	in := startInstance(t, "-socket", sock, "-take-over-lock", lock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitUntil(t, "the stand-in's health", func() bool { return rpc.CheckHealth(ctx, sock, "") == nil })
	select {
	case <-in.started:
		t.Fatal("ran while another instance held the lock")
	default:
	}
	if err := rpc.CheckActive(ctx, sock); err == nil || !strings.Contains(err.Error(), "stand-in") {
		t.Errorf("CheckActive of the stand-in: %v, want an error naming it", err)
	}
	cc, err := rpc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	err = cc.Invoke(ctx, "/netdra.test.Nope/Call", &emptypb.Empty{}, &emptypb.Empty{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), lock) {
		t.Errorf("a call to the stand-in: %v, want Unavailable naming %s", err, lock)
	}
	if log := in.log.String(); !strings.Contains(log, "Standing by") || !strings.Contains(log, lock) {
		t.Errorf("log %q: want why it stands by", log)
	}

	first.Close()
	select {
	case <-in.started:
	case <-time.After(10 * time.Second):
		t.Fatal("did not take over once the lock was free")
	}
	if f, err := tryLock(lock); err != nil || f != nil {
		f.Close()
		t.Errorf("the lock was free while the second instance ran (%v)", err)
	}
	close(in.stop)
	if err := <-in.done; err != nil {
		t.Errorf("%v; log %s", err, in.log.String())
	}
	f, err := tryLock(lock)
	if err != nil || f == nil {
		t.Fatalf("the lock still held after the instance exited: %v", err)
	}
	f.Close()
}

// TestTakeOver_AfterAnotherServes: an instance given -take-over-after
// stands by while nothing serves that socket and while a stand-in does,
// and runs once the process's own server serves it.
func TestTakeOver_AfterAnotherServes(t *testing.T) {
	dir := shortDir(t)
	sock, after := filepath.Join(dir, "x.sock"), filepath.Join(dir, "after.sock")
	quiet := slog.New(slog.DiscardHandler)
	standIn := rpc.NewStandIn(rpc.ServerConfig{SocketPath: after, Logger: quiet}, "waiting")
	standInDone := make(chan error, 1)
	go func() { standInDone <- standIn.Serve() }()

	in := startInstance(t, "-socket", sock, "-take-over-after", after)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitUntil(t, "the stand-in's health", func() bool { return rpc.CheckHealth(ctx, sock, "") == nil })
	waitUntil(t, "the wait logged", func() bool { return strings.Contains(in.log.String(), "stand-in") })
	select {
	case <-in.started:
		t.Fatal("ran while the socket it waits for had a stand-in")
	default:
	}
	standIn.Stop()
	if err := <-standInDone; err != nil {
		t.Fatal(err)
	}
	real := rpc.NewServer(rpc.ServerConfig{SocketPath: after, Logger: quiet})
	realDone := make(chan error, 1)
	go func() { realDone <- real.Serve() }()
	defer func() { real.Stop(); <-realDone }()
	select {
	case <-in.started:
	case <-time.After(10 * time.Second):
		t.Fatalf("did not take over once %s served; log %s", after, in.log.String())
	}
	close(in.stop)
	<-in.done
}

// TestTakeOver_ReadyAndEnd: a Ready condition is tried until it holds; an
// error from it ends the wait with that error; a context that ends ends
// it too, with nothing left listening.
func TestTakeOver_ReadyAndEnd(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "x.sock")
	quiet := slog.New(slog.DiscardHandler)
	cfg := rpc.ServerConfig{SocketPath: sock, Logger: quiet}
	tries := 0
	to := TakeOver{Ready: func() (bool, string, error) { tries++; return tries >= 3, "not yet", nil }}
	release, err := to.StandBy(context.Background(), quiet, cfg)
	if err != nil || tries != 3 {
		t.Fatalf("StandBy: %v after %d tries, want nil after 3", err, tries)
	}
	release()

	boom := errors.New("boom")
	to = TakeOver{Ready: func() (bool, string, error) { return false, "", boom }}
	if _, err := to.StandBy(context.Background(), quiet, cfg); !errors.Is(err, boom) {
		t.Errorf("StandBy with a failing condition: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	to = TakeOver{Ready: func() (bool, string, error) { return false, "never", nil }}
	done := make(chan error, 1)
	go func() { _, err := to.StandBy(ctx, quiet, cfg); done <- err }()
	waitUntil(t, "the stand-in's health", func() bool { return rpc.CheckHealth(context.Background(), sock, "") == nil })
	cancel()
	if err := <-done; !errors.Is(err, errStoppedStandingBy) {
		t.Errorf("StandBy after its context ended: %v", err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stand-in's socket after the wait: %v, want gone", err)
	}
}
