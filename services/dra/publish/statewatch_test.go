package publish

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// scriptedState serves the n-th Watch call the n-th list of events, then
// breaks that stream; calls past the script block until their context
// ends. It records each call's starting position.
type scriptedState struct {
	mu      sync.Mutex
	script  [][]*statev1.WatchResponse
	from    []string
	blocked chan struct{}
}

func (s *scriptedState) Watch(ctx context.Context, in *statev1.WatchRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[statev1.WatchResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.from = append(s.from, in.GetEpoch()+"/"+strconv.FormatUint(in.GetRevision(), 10))
	if len(s.from) > len(s.script) {
		close(s.blocked)
		return &fakeStream{ctx: ctx}, nil
	}
	return &scriptedStream{events: s.script[len(s.from)-1]}, nil
}

type scriptedStream struct {
	grpc.ClientStream
	events []*statev1.WatchResponse
}

func (s *scriptedStream) Recv() (*statev1.WatchResponse, error) {
	if len(s.events) == 0 {
		return nil, io.ErrUnexpectedEOF
	}
	ev := s.events[0]
	s.events = s.events[1:]
	return ev, nil
}

// TestFollowState_Resumes breaks the stream after a snapshot cut short,
// after a numbered event, and at a handler's error: each reopening starts
// from the last numbered event or SYNCED mark applied, never from a
// snapshot row, and the event the handler failed comes again.
func TestFollowState_Resumes(t *testing.T) {
	row := func(epoch string, typ statev1.EventType, rev uint64) *statev1.WatchResponse {
		return &statev1.WatchResponse{Epoch: epoch, Type: typ, Revision: rev}
	}
	st := &scriptedState{blocked: make(chan struct{}), script: [][]*statev1.WatchResponse{
		{row("e1", statev1.EventType_EVENT_TYPE_RESET, 0), row("e1", statev1.EventType_EVENT_TYPE_UPSERT, 0)},
		{row("e1", statev1.EventType_EVENT_TYPE_RESET, 0), row("e1", statev1.EventType_EVENT_TYPE_SYNCED, 4), row("e1", statev1.EventType_EVENT_TYPE_UPSERT, 5)},
		{row("e1", statev1.EventType_EVENT_TYPE_DELETE, 6), row("e1", statev1.EventType_EVENT_TYPE_UPSERT, 7)},
		{row("e1", statev1.EventType_EVENT_TYPE_UPSERT, 7)},
	}}
	var applied []uint64
	failed := false
	h := func(ev *statev1.WatchResponse) error {
		if ev.GetRevision() == 7 && !failed {
			failed = true
			return errors.New("refused once")
		}
		applied = append(applied, ev.GetRevision())
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- followState(ctx, slog.New(slog.DiscardHandler), st, h) }()
	select {
	case <-st.blocked:
	case <-ctx.Done():
		t.Fatal("the watch was not reopened past its script")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("followState = %v, want context.Canceled", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if diff := cmp.Diff([]string{"/0", "/0", "e1/5", "e1/6", "e1/7"}, st.from); diff != "" {
		t.Errorf("Watch positions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{0, 0, 0, 4, 5, 6, 7}, applied); diff != "" {
		t.Errorf("applied revisions (-want +got):\n%s", diff)
	}
}
