package sockkeep

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWatchHolder: a dra serving on held sockets goes on while the holder
// holds them, stops with an error naming them once a restarted holder no
// longer does (the kubelet deregistered the plugin), and says nothing
// once its plugin stops serving.
func TestWatchHolder(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	handover := filepath.Join(dir, "h.sock")
	paths := KubeletPaths(filepath.Join(dir, "plugins"), dir, "netdra.io")
	fatal := make(chan error, 1)
	watch := func(ctx context.Context, done chan struct{}) { // as dra does: its error stops dra
		if err := WatchHolder(ctx, log, handover, paths); err != nil {
			fatal <- err
		}
		close(done)
	}

	h := NewHolder(log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = h.Serve(ctx, handover) }()
	defer h.Close()
	held, err := TakeKubelet(ctx, log, handover, paths, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	held.CloseUnused()

	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go watch(wctx, done)
	select {
	case err := <-fatal:
		t.Fatalf("while the holder holds the sockets: %v", err)
	case <-time.After(2*holderCheckInterval + time.Second):
	}

	// The holder restarted: it holds nothing, the files are gone.
	h.Close()
	select {
	case err := <-fatal:
		if !strings.Contains(err.Error(), "no longer the kubelet sockets") || !strings.Contains(err.Error(), "netdra.io-reg.sock") {
			t.Errorf("error %q, want one naming the sockets no longer held", err)
		}
	case <-time.After(2*holderCheckInterval + time.Second):
		t.Fatal("no error after the holder released the sockets")
	}
	<-done

	// A plugin that stopped serving (a rename) watches no more.
	done = make(chan struct{})
	go watch(wctx, done)
	stop()
	select {
	case err := <-fatal:
		t.Errorf("after the plugin stopped serving: %v", err)
	case <-done:
	}
	select {
	case err := <-fatal:
		t.Errorf("after the plugin stopped serving: %v", err)
	default:
	}
}
