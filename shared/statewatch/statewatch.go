// Package statewatch follows the state service's Watch stream for a client,
// across restarts of either side: it reconnects with backoff and resumes
// from the last event it handed over, so the handler sees every change once,
// or EVENT_TYPE_RESET and a full snapshot when the service cannot resume
// (it restarted, or the client fell too far behind).
package statewatch

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/rpc"
)

// Handler applies one event. An error ends the stream; it is reopened from
// the last event applied, so the failed one comes again.
type Handler func(ev *statev1.WatchResponse) error

// Watcher opens the state service's Watch stream from a position;
// statev1.StateServiceClient satisfies it.
type Watcher interface {
	Watch(ctx context.Context, in *statev1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[statev1.WatchResponse], error)
}

var _ Watcher = statev1.StateServiceClient(nil)

// Cursor is the position of the last event a watcher applied.
type Cursor struct {
	Epoch    string
	Revision uint64
}

// Run watches until ctx is done and returns ctx.Err(). It starts from
// cursor (the zero Cursor for a fresh start).
func Run(ctx context.Context, log *slog.Logger, client Watcher, cursor Cursor, h Handler) error {
	return rpc.Retry(ctx, log, "state watch", func(ctx context.Context) error {
		return follow(ctx, client, &cursor, h)
	})
}

func follow(ctx context.Context, client Watcher, cur *Cursor, h Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Watch(ctx, &statev1.WatchRequest{Epoch: cur.Epoch, Revision: cur.Revision})
	if err != nil {
		return fmt.Errorf("opening watch: %w", err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("receiving: %w", err)
		}
		if err := h(ev); err != nil {
			return fmt.Errorf("handling revision %d: %w", ev.GetRevision(), err)
		}
		// Snapshot rows carry revision 0: resume only from a numbered event
		// or a SYNCED mark, so a snapshot cut short is sent again whole.
		if ev.GetRevision() != 0 || ev.GetType() == statev1.EventType_EVENT_TYPE_SYNCED {
			*cur = Cursor{Epoch: ev.GetEpoch(), Revision: ev.GetRevision()}
		}
	}
}
