package process

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netdra/netdra/shared/rpc"
)

// runServer starts RunServer in a goroutine and waits until srv is healthy.
func runServer(t *testing.T, ctx context.Context, path string, extra ...Actor) <-chan error {
	t.Helper()
	srv := rpc.NewServer(rpc.ServerConfig{SocketPath: path, Logger: testLogger(t)})
	t.Cleanup(srv.Stop)
	errc := make(chan error, 1)
	go func() { errc <- RunServer(ctx, testLogger(t), srv, extra...) }()
	eventually(t, "server healthy", func() error {
		select {
		case err := <-errc:
			t.Fatalf("RunServer returned early: %v", err)
		default:
		}
		return rpc.CheckHealth(ctx, path, "")
	})
	return errc
}

func waitRun(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("RunServer did not return")
		return nil
	}
}

func TestRunServerStopsWithContext(t *testing.T) {
	path := socketPath(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interrupted := make(chan error, 1)
	extra := Actor{
		Execute: func() error {
			<-ctx.Done()
			return nil
		},
		Interrupt: func(err error) { interrupted <- err },
	}
	errc := runServer(t, ctx, path, extra)

	cancel()
	if err := waitRun(t, errc); err != nil {
		t.Fatalf("RunServer after cancel: %v, want nil", err)
	}
	select {
	case <-interrupted:
	default:
		t.Error("extra actor was not interrupted")
	}
	if err := isNotExist(path); err != nil {
		t.Error(err)
	}
	if err := rpc.CheckHealth(testCtx(t), path, ""); err == nil {
		t.Error("socket still answers after RunServer returned")
	}
}

func TestRunServerStopsOnSignal(t *testing.T) {
	// Catch SIGTERM here too, so that a signal sent before RunServer
	// subscribes cannot kill the test binary.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGTERM)
	defer signal.Stop(sigc)

	path := socketPath(t)
	errc := runServer(t, testCtx(t), path)
	// Keep signalling until RunServer notices: it may subscribe only after
	// the server is up.
	for {
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("RunServer after SIGTERM: %v, want nil", err)
			}
			if err := isNotExist(path); err != nil {
				t.Error(err)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestRunServerActorError(t *testing.T) {
	path := socketPath(t)
	errBroken := errors.New("controller broke")
	fail := make(chan struct{})
	errc := runServer(t, testCtx(t), path, Actor{
		Execute: func() error {
			<-fail
			return errBroken
		},
		Interrupt: func(error) {},
	})

	close(fail)
	if err := waitRun(t, errc); !errors.Is(err, errBroken) {
		t.Fatalf("RunServer returned %v, want %v", err, errBroken)
	}
	if err := isNotExist(path); err != nil {
		t.Errorf("server not stopped: %v", err)
	}
}

func TestUIDList(t *testing.T) {
	tests := []struct {
		in      string
		want    UIDList
		wantErr bool
	}{
		{in: "0,1000", want: UIDList{0, 1000}},
		{in: " 0 , 65534,", want: UIDList{0, 65534}},
		{in: "4294967295", want: UIDList{4294967295}},
		{in: "", want: nil},
		{in: "root", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "4294967296", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			l := UIDList{7} // Set replaces, and keeps the list on error.
			err := l.Set(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Set(%q) = nil, want error", tt.in)
				}
				if diff := cmp.Diff(UIDList{7}, l); diff != "" {
					t.Errorf("list changed on error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Set(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, l); diff != "" {
				t.Errorf("Set(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestUIDListFlag(t *testing.T) {
	var uids UIDList
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.Var(&uids, "allowed-uids", "uids allowed to connect")
	if err := fs.Parse([]string{"-allowed-uids=0,1000"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(UIDList{0, 1000}, uids); diff != "" {
		t.Errorf("parsed flag (-want +got):\n%s", diff)
	}
	if got, want := fs.Lookup("allowed-uids").Value.String(), "0,1000"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	var nilList *UIDList
	if got := nilList.String(); got != "" {
		t.Errorf("nil String() = %q, want empty", got)
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// socketPath returns a socket path in a fresh directory short enough for
// the 108-byte sun_path limit (t.TempDir can be too long).
func socketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "proc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

// eventually polls cond until it returns nil or a generous deadline passes.
func eventually(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing at deadline: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func isNotExist(path string) error {
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return errors.New(path + " still exists")
	}
	return nil
}
