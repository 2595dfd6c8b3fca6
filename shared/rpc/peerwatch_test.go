package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// TestPeerWatch: a peer whose socket is missing is named, with the dial's
// reason, in the log and in Waiting once the grace has passed; once the
// peer serves, the watch says it is reached and Waiting is empty.
func TestPeerWatch(t *testing.T) {
	path := socketPath(t)
	cc := dial(t, path)
	var logs testenv.Buffer
	w := NewPeerWatch(slog.New(slog.NewTextHandler(&logs, nil)), 300*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Watch(ctx, "state service", path, cc); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	if got := w.Waiting(); len(got) != 0 {
		t.Fatalf("Waiting before the grace: %q", got)
	}
	eventually(t, "the missing peer named", func() error {
		got := w.Waiting()
		if len(got) != 1 || !strings.Contains(got[0], "state service ("+path+")") || !strings.Contains(got[0], "no such file") {
			return fmt.Errorf("Waiting = %q", got)
		}
		return nil
	})
	if l := logs.String(); !strings.Contains(l, "Cannot reach a peer") || !strings.Contains(l, "no such file") {
		t.Errorf("log:\n%s", l)
	}

	startServer(t, ServerConfig{SocketPath: path}, newTestService().register)
	eventually(t, "the peer reached", func() error {
		if got := w.Waiting(); len(got) != 0 {
			return fmt.Errorf("Waiting = %q", got)
		}
		if !strings.Contains(logs.String(), "Reached a peer") {
			return fmt.Errorf("no 'Reached a peer' in the log")
		}
		return nil
	})
	t.Log(logs.String())
}
