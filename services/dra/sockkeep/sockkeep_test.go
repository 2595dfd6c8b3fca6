package sockkeep

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startHolder serves a holder on a handover socket in a fresh directory.
func startHolder(t *testing.T) (h *Holder, handover, dir string) {
	t.Helper()
	dir = t.TempDir()
	handover = filepath.Join(dir, "h.sock")
	h = NewHolder(slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, handover) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		h.Close()
	})
	return h, handover, dir
}

func take(t *testing.T, handover string, paths []string, renew bool) *Taken {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tk, err := Take(ctx, handover, paths, renew, nil)
	if err != nil {
		t.Fatalf("Take(%v): %v", paths, err)
	}
	if len(tk.Listeners) != len(paths) {
		t.Fatalf("Take(%v) handed over %d listeners", paths, len(tk.Listeners))
	}
	return tk
}

// send connects to the socket at path as the kubelet does and writes msg;
// nobody needs to accept for both to succeed (the backlog holds it).
func send(t *testing.T, path, msg string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		t.Fatalf("connecting to %s: %v", path, err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	return c
}

// acceptRead accepts one connection on l and reads len(want) bytes of it.
func acceptRead(t *testing.T, l net.Listener, want string) {
	t.Helper()
	l.(*net.UnixListener).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	defer c.Close()
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("read %q, %v; want %q", buf, err, want)
	}
}

func mustExist(t *testing.T, path string, exist bool) {
	t.Helper()
	fi, err := os.Lstat(path)
	switch {
	case exist && err != nil:
		t.Fatalf("%s: %v", path, err)
	case exist && fi.Mode().Type() != os.ModeSocket:
		t.Fatalf("%s is a %s, not a socket", path, fi.Mode().Type())
	case !exist && !os.IsNotExist(err):
		t.Fatalf("%s still there (%v)", path, err)
	}
}

// TestHandover is a client's life across restarts: the sockets created
// at the first take, a connection made while no client holds them waiting
// in the backlog and accepted by the next client, the registration
// remembered until the sockets are created anew, and a socket no longer
// asked for closed and removed.
func TestHandover(t *testing.T) {
	h, handover, dir := startHolder(t)
	plugin := filepath.Join(dir, "plugins", "netdra.io", "dra.sock")
	reg := filepath.Join(dir, "registry", "netdra.io-reg.sock")
	paths := []string{plugin, reg}

	first := take(t, handover, paths, false)
	if first.Inherited || first.Registered {
		t.Fatalf("first take: inherited %v, registered %v; want both false", first.Inherited, first.Registered)
	}
	send(t, plugin, "one")
	acceptRead(t, first.Listeners[plugin], "one")
	ctx := context.Background()
	if err := MarkRegistered(ctx, handover, paths); err != nil {
		t.Fatal(err)
	}

	// The client dies: its descriptors close, the holder's stay.
	first.Close()
	mustExist(t, plugin, true)
	mustExist(t, reg, true)
	send(t, plugin, "while away")
	send(t, reg, "registration while away")

	second := take(t, handover, paths, false)
	defer second.Close()
	if !second.Inherited || !second.Registered {
		t.Fatalf("second take: inherited %v, registered %v; want both true", second.Inherited, second.Registered)
	}
	acceptRead(t, second.Listeners[plugin], "while away")
	acceptRead(t, second.Listeners[reg], "registration while away")

	// Renewed: new sockets, the registration forgotten.
	second.Close()
	third := take(t, handover, paths, true)
	defer third.Close()
	if third.Inherited || third.Registered {
		t.Fatalf("renewed take: inherited %v, registered %v; want both false", third.Inherited, third.Registered)
	}
	send(t, reg, "after renew")
	acceptRead(t, third.Listeners[reg], "after renew")

	// A rename: only the new name's sockets are held.
	third.Close()
	renamed := filepath.Join(dir, "registry", "other.io-reg.sock")
	fourth := take(t, handover, []string{renamed}, false)
	defer fourth.Close()
	mustExist(t, plugin, false)
	mustExist(t, reg, false)
	mustExist(t, renamed, true)
	if got := h.Held(); len(got) != 1 || got[0] != renamed {
		t.Fatalf("held %v, want [%s]", got, renamed)
	}

	// The holder's end removes what it held.
	h.Close()
	mustExist(t, renamed, false)
}

// TestTakeRefused: bad requests are refused naming the field, and a path
// the holder cannot listen on hands nothing over and leaves what it held.
func TestTakeRefused(t *testing.T) {
	h, handover, dir := startHolder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held := filepath.Join(dir, "held.sock")
	take(t, handover, []string{held}, false).Close()

	notSocket := filepath.Join(dir, "file")
	if err := os.WriteFile(notSocket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		paths []string
		want  string
	}{
		{[]string{"relative.sock"}, "paths[0]"},
		{[]string{held, held}, "paths[1]"},
		{[]string{held, filepath.Join(dir, strings.Repeat("x", 120))}, "paths[1]"},
		{[]string{held, notSocket}, "paths[1]"},
	} {
		_, err := Take(ctx, handover, tc.paths, false, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Take(%v): %v; want an error naming %s", tc.paths, err, tc.want)
		}
	}
	if err := MarkRegistered(ctx, handover, []string{filepath.Join(dir, "never.sock")}); err == nil || !strings.Contains(err.Error(), "not held") {
		t.Errorf("MarkRegistered of a path not held: %v", err)
	}
	if got := h.Held(); len(got) != 1 || got[0] != held {
		t.Fatalf("after the refusals the holder holds %v, want [%s]", got, held)
	}
	mustExist(t, held, true)
}

// TestTakeWaitsForHolder: a client started before its holder waits for it.
func TestTakeWaitsForHolder(t *testing.T) {
	dir := t.TempDir()
	handover := filepath.Join(dir, "h.sock")
	var waited int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := NewHolder(slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	defer h.Close()
	go func() {
		time.Sleep(500 * time.Millisecond)
		_ = h.Serve(ctx, handover)
	}()
	tk, err := Take(ctx, handover, []string{filepath.Join(dir, "p.sock")}, false, func(error) { waited++ })
	if err != nil {
		t.Fatal(err)
	}
	tk.Close()
	if waited == 0 {
		t.Fatal("Take did not report waiting for the holder")
	}
}

// TestHealth: `dra sockets health` answers 0 against a serving holder,
// whatever it holds, and changes nothing; 1 naming the socket when no
// holder serves there; a held request with paths is refused naming them.
func TestHealth(t *testing.T) {
	h, handover, dir := startHolder(t)
	p := filepath.Join(dir, "p.sock")
	waitServing(t, handover)
	var stderr strings.Builder
	if code := Main([]string{"health", "-socket=" + handover}, &stderr); code != 0 {
		t.Fatalf("health of a holder holding nothing: exit %d: %s", code, stderr.String())
	}
	take(t, handover, []string{p}, false).Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held, err := Held(ctx, handover)
	if err != nil || len(held) != 1 || held[0] != p {
		t.Fatalf("Held: %v %v, want [%s]", held, err, p)
	}
	if code := Main([]string{"health", "-socket=" + handover}, &stderr); code != 0 {
		t.Fatalf("health: exit %d: %s", code, stderr.String())
	}
	if got := h.Held(); len(got) != 1 || got[0] != p {
		t.Fatalf("after the health checks the holder holds %v, want [%s]", got, p)
	}
	mustExist(t, p, true)

	absent := filepath.Join(dir, "absent.sock")
	stderr.Reset()
	if code := Main([]string{"health", "-socket=" + absent}, &stderr); code != 1 || !strings.Contains(stderr.String(), absent) {
		t.Errorf("health without a holder: exit %d, stderr %q; want 1 naming %s", code, stderr.String(), absent)
	}
	req := Request{Op: OpHeld, Paths: []string{p}}
	if err := req.Validate(); err == nil || !strings.Contains(err.Error(), "paths") {
		t.Errorf("a held request with paths: %v, want an error naming paths", err)
	}
}

// waitServing waits until a holder answers at handover.
func waitServing(t *testing.T, handover string) {
	t.Helper()
	waitServingHeld(t, handover, -1)
}

// TestHolderReplaced is a holder pod replaced while dra runs on: the new
// holder waits for the old one's handover socket, a kubelet socket the
// old one still serves is refused to the new one, and once the old one is
// gone the new one serves and creates the sockets anew; an old holder
// that leaves after a successor made a socket file in place of its own
// leaves that file.
func TestHolderReplaced(t *testing.T) {
	dir := t.TempDir()
	handover := filepath.Join(dir, "h.sock")
	plugin := filepath.Join(dir, "dra.sock")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	serve := func(h *Holder) (stop func() error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.Serve(ctx, handover) }()
		return func() error { cancel(); return <-done }
	}
	old := NewHolder(quiet, nil)
	stopOld := serve(old)
	waitServing(t, handover)
	take(t, handover, []string{plugin}, false).Close()

	next := NewHolder(quiet, nil)
	defer next.Close()
	stopNext := serve(next)
	time.Sleep(2 * handoverRetry)
	if held, err := Held(context.Background(), handover); err != nil || len(held) != 1 || held[0] != plugin {
		t.Fatalf("while the new holder waits, the old one answers: held %v, %v; want [%s]", held, err, plugin)
	}
	if r, _ := next.take([]string{plugin}, false); !strings.Contains(r.Error, "in use") {
		t.Fatalf("the new holder's take of a socket the old one serves: %q, want in use", r.Error)
	}

	// The old holder leaves (its pod deleted): its files go, and the new
	// one serves the handover socket and creates the kubelet socket anew.
	if err := stopOld(); err != nil {
		t.Fatalf("old holder's Serve: %v", err)
	}
	old.Close()
	mustExist(t, plugin, false)
	waitServingHeld(t, handover, 0)
	tk := take(t, handover, []string{plugin}, false)
	defer tk.Close()
	if tk.Inherited {
		t.Fatal("the new holder's first take says inherited")
	}

	// A holder whose socket file was replaced by its successor's (removed
	// by hand in between) leaves the successor's file when it goes.
	stale := NewHolder(quiet, nil)
	other := filepath.Join(dir, "other.sock")
	if r, _ := stale.take([]string{other}, false); r.Error != "" {
		t.Fatal(r.Error)
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if r, _ := next.take([]string{plugin, other}, false); r.Error != "" {
		t.Fatal(r.Error)
	}
	stale.Close()
	mustExist(t, other, true)
	send(t, other, "still the new holder's")
	if err := stopNext(); err != nil {
		t.Fatalf("new holder's Serve: %v", err)
	}
}

// waitServingHeld waits until a holder holding n sockets (any number when
// n is negative) answers at handover.
func waitServingHeld(t *testing.T, handover string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		held, err := Held(context.Background(), handover)
		if err == nil && (n < 0 || len(held) == n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no holder holding %d sockets answers at %s: %v %v", n, handover, held, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
