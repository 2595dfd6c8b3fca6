package gatehook

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// socketPath is a short socket path (unix socket paths are limited to
// 108 bytes), removed at the end of the test.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "gate.sock")
}

// serve serves s on a new socket until the test ends.
func serve(t *testing.T, s Server) string {
	t.Helper()
	path := socketPath(t)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return path
}

// rawServer listens on a new socket and hands each connection to
// handle, which speaks whatever it likes: a server that breaks the
// contract.
func rawServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	path := socketPath(t)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return path
}

// TestAsk: the gate's answers, through the real server on a unix socket,
// as the hook reports them to the runtime.
func TestAsk(t *testing.T) {
	var got Request
	attached := serve(t, Server{Wait: func(_ context.Context, req Request) error { got = req; return nil }})
	if err := Ask(context.Background(), attached, Request{PodUID: "u1", Netns: "/var/run/netns/p1"}, 2*time.Second); err != nil {
		t.Fatalf("Ask, attached: %v", err)
	}
	if got.PodUID != "u1" || got.Netns != "/var/run/netns/p1" || got.WaitMillis != 1800 {
		t.Errorf("the server read %+v, want pod u1, netns /var/run/netns/p1, 1800 ms (the hook's 2 s less its margin)", got)
	}

	reason := "netdra: pod u1: device data1 (claim default/c): attaching data1: 100% «gone»"
	refused := serve(t, Server{Wait: func(context.Context, Request) error { return errors.New(reason) }})
	if err := Ask(context.Background(), refused, Request{PodUID: "u1"}, time.Second); err == nil || err.Error() != reason {
		t.Errorf("Ask, refused: %v, want the plugin's reason alone: %s", err, reason)
	}

	// The server answers within the request's wait, with its reason.
	slow := serve(t, Server{Wait: func(ctx context.Context, _ Request) error {
		<-ctx.Done()
		return errors.New("netdra: pod u1: the attach of the pod's devices has not finished yet")
	}})
	start := time.Now()
	err := Ask(context.Background(), slow, Request{PodUID: "u1"}, 300*time.Millisecond)
	if err == nil || err.Error() != "netdra: pod u1: the attach of the pod's devices has not finished yet" {
		t.Errorf("Ask, not attached in time: %v, want the server's reason", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Ask took %s with a 300ms wait", d)
	}

	empty := serve(t, Server{Wait: func(context.Context, Request) error { t.Error("Wait called for a request without a pod"); return nil }})
	if err := Ask(context.Background(), empty, Request{}, time.Second); err == nil || !strings.Contains(err.Error(), "podUID empty") {
		t.Errorf("Ask without a pod: %v, want the server's refusal naming podUID", err)
	}
}

// TestAsk_NriGone: no socket, or a socket nobody listens on (nri died and
// left it), is a refusal at once that says nri is not running.
func TestAsk_NriGone(t *testing.T) {
	missing := socketPath(t)
	stale := socketPath(t)
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	for name, path := range map[string]string{"no socket": missing, "stale socket": stale} {
		start := time.Now()
		err := Ask(context.Background(), path, Request{PodUID: "u1"}, 10*time.Second)
		if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "the container is not started without its pod's devices") {
			t.Errorf("%s: %v, want ErrNotRunning in a refusal", name, err)
		}
		if name == "stale socket" && !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: %v, want ECONNREFUSED", name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: refused after %s, want at once", name, d)
		}
	}
}

// TestAsk_TornConnection: a server that closes the connection before its
// whole answer, or answers what is not the contract's, refuses.
func TestAsk_TornConnection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		handle func(net.Conn)
		want   string
	}{
		{"never answers", func(c net.Conn) { _ = readFrame(c, &Request{}); time.Sleep(3 * time.Second) },
			"did not say they are attached within 2s"},
		{"closed before answering", func(c net.Conn) { _ = readFrame(c, &Request{}) }, "gave no answer: EOF"},
		{"closed mid-length", func(c net.Conn) { _ = readFrame(c, &Request{}); c.Write([]byte{0, 0}) }, "gave no answer: unexpected EOF"},
		{"closed mid-frame", func(c net.Conn) {
			_ = readFrame(c, &Request{})
			c.Write(append(binary.BigEndian.AppendUint32(nil, 20), `{"attached":tr`...))
		}, "gave no answer: unexpected EOF"},
		{"not JSON", func(c net.Conn) {
			_ = readFrame(c, &Request{})
			c.Write(append(binary.BigEndian.AppendUint32(nil, 3), "yes"...))
		}, "not the gate's JSON"},
		{"a frame too long", func(c net.Conn) {
			_ = readFrame(c, &Request{})
			c.Write(binary.BigEndian.AppendUint32(nil, MaxFrame+1))
		}, "over 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := rawServer(t, tc.handle)
			err := Ask(context.Background(), path, Request{PodUID: "u1"}, 2*time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "the container is not started") {
				t.Errorf("Ask: %v, want a refusal with %q", err, tc.want)
			}
		})
	}
}

// TestServe_HookHangsUp: a hook that goes (the runtime killed it) ends the
// server's wait for it; a request cut short is not answered, and the
// server goes on serving.
func TestServe_HookHangsUp(t *testing.T) {
	ended := make(chan error, 1)
	path := serve(t, Server{Wait: func(ctx context.Context, req Request) error {
		if req.PodUID == "quick" {
			return nil
		}
		<-ctx.Done()
		ended <- ctx.Err()
		return ctx.Err()
	}})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(c, Request{PodUID: "u1", WaitMillis: 60_000}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	c.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the wait ended with %v, want cancelled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server still waits for a hook that hung up")
	}

	torn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	torn.Write(append(binary.BigEndian.AppendUint32(nil, 50), `{"podUID":`...))
	torn.Close()
	if err := Ask(context.Background(), path, Request{PodUID: "quick"}, 2*time.Second); err != nil {
		t.Errorf("Ask after a torn request: %v", err)
	}
}

// TestServe_Admit: a connection Admit refuses is closed unanswered, which
// the hook reports as a refusal.
func TestServe_Admit(t *testing.T) {
	warned := make(chan string, 1)
	path := serve(t, Server{
		Wait:  func(context.Context, Request) error { t.Error("Wait called for a refused peer"); return nil },
		Admit: func(net.Conn) error { return errors.New("peer uid 1000 is not allowed") },
		Warn:  func(msg string, args ...any) { warned <- msg },
	})
	// The server may close before or after the hook wrote its request.
	if err := Ask(context.Background(), path, Request{PodUID: "u1"}, time.Second); err == nil || !strings.Contains(err.Error(), "the container is not started") {
		t.Errorf("Ask of a refused peer: %v", err)
	}
	if msg := <-warned; !strings.Contains(msg, "refused") {
		t.Errorf("warned %q, want the refusal", msg)
	}
}
