package publish

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/rpc"
)

// StateWatcher opens the state service's Watch stream from a position;
// statev1.StateServiceClient satisfies it.
type StateWatcher interface {
	Watch(ctx context.Context, in *statev1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[statev1.WatchResponse], error)
}

var _ StateWatcher = statev1.StateServiceClient(nil)

// watchCursor is the position of the last event a watch applied.
type watchCursor struct {
	epoch    string
	revision uint64
}

// followState follows the state service's Watch stream from its start
// until ctx is done, and then returns ctx.Err(). Across restarts of
// either side it reopens the stream under rpc.Retry, resuming from the
// last event h applied, so h sees every change once, or EVENT_TYPE_RESET
// and a full snapshot when the service cannot resume (it restarted, or
// this client fell too far behind). An error from h ends the stream; it
// is reopened from the last event applied, so the failed one comes again.
func followState(ctx context.Context, log *slog.Logger, client StateWatcher, h func(*statev1.WatchResponse) error) error {
	var cur watchCursor
	return rpc.Retry(ctx, log, "state watch", func(ctx context.Context) error {
		return followStream(ctx, client, &cur, h)
	})
}

// followStream opens the stream once, from cur, and hands its events to h
// until it breaks, moving cur past each event applied.
func followStream(ctx context.Context, client StateWatcher, cur *watchCursor, h func(*statev1.WatchResponse) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Watch(ctx, &statev1.WatchRequest{Epoch: cur.epoch, Revision: cur.revision})
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
			*cur = watchCursor{epoch: ev.GetEpoch(), revision: ev.GetRevision()}
		}
	}
}
