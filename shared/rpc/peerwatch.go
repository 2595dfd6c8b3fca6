package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Calls on a Dial connection wait for the server (WaitForReady), so a peer
// that cannot be reached at all (its socket missing, or refused by the
// socket folder's permissions) would make its caller wait silently. A
// PeerWatch says so: in the log and in Waiting, which the processes'
// Status answers carry.

// DefaultPeerGrace is how long a peer may be unreachable before PeerWatch
// says so: longer than a restart of the peer's process takes.
const DefaultPeerGrace = 3 * time.Second

// peerRepeat is how often a peer that stays unreachable is logged again.
const peerRepeat = 30 * time.Second

// PeerWatch watches the connections to a process's peers.
type PeerWatch struct {
	log   *slog.Logger
	grace time.Duration
	mu    sync.Mutex
	down  map[string]string // peer -> what Waiting says of it
}

// NewPeerWatch returns a PeerWatch that logs to log and says a peer is
// unreachable once it has been so for grace (DefaultPeerGrace when not
// positive).
func NewPeerWatch(log *slog.Logger, grace time.Duration) *PeerWatch {
	if grace <= 0 {
		grace = DefaultPeerGrace
	}
	return &PeerWatch{log: log, grace: grace, down: map[string]string{}}
}

// Waiting returns what the process waits for: one line for each peer that
// has been unreachable for longer than the grace, with the reason the
// connection gives, sorted.
func (w *PeerWatch) Waiting() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range w.down {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Watch watches conn, the connection to the peer name at socket, until ctx
// ends. While the connection is not ready for longer than the grace it
// logs a warning with the connection's error (asked of the peer's health
// service without waiting) and again every peerRepeat, and Waiting names
// the peer; once it is ready again it logs that and Waiting forgets it. It
// makes the connection connect if it is idle, and returns when ctx ends.
func (w *PeerWatch) Watch(ctx context.Context, name, socket string, conn *grpc.ClientConn) {
	var since time.Time // when the connection last stopped being ready
	var said time.Time  // when it was last logged as unreachable
	tick := time.NewTicker(w.grace / 3)
	defer tick.Stop()
	for {
		st := conn.GetState()
		if st == connectivity.Idle {
			conn.Connect()
		}
		switch {
		case st == connectivity.Ready:
			if !said.IsZero() {
				w.log.Info("Reached a peer", "peer", name, "socket", socket, "after", time.Since(since).Round(time.Millisecond))
			}
			since, said = time.Time{}, time.Time{}
			w.set(name, "")
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= w.grace && time.Since(said) >= peerRepeat:
			reason := w.probe(ctx, conn)
			w.log.Warn("Cannot reach a peer: calls to it wait", "peer", name, "socket", socket,
				"for", time.Since(since).Round(100*time.Millisecond), "state", st.String(), "error", reason)
			said = time.Now()
			w.set(name, fmt.Sprintf("%s (%s): %s since %s", name, socket, reason, since.UTC().Format(time.RFC3339)))
		}
		// Woken by a change of state, or by the ticker to count the grace.
		wait, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-tick.C:
			case <-wait.Done():
			}
			cancel()
		}()
		conn.WaitForStateChange(wait, st)
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
}

// probe returns why conn cannot reach its peer, as a fail-fast health
// check says it (the dial's error: no such file, permission denied).
func (w *PeerWatch) probe(ctx context.Context, conn *grpc.ClientConn) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	if err == nil {
		return "connecting"
	}
	return err.Error()
}

func (w *PeerWatch) set(name, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if what == "" {
		delete(w.down, name)
	} else {
		w.down[name] = what
	}
}
