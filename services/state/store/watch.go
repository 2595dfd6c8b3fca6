package store

import (
	"context"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// changeLogSize is how many changes a watcher can fall behind, or be
// disconnected for, and still resume without a full snapshot (the log
// keeps between one and two times as many). Each change keeps its own
// copy of the row, so a longer log would be most of the service's heap
// under churn; this one still holds the publication of a large node's
// inventory. A watcher further behind gets a snapshot, which is about as
// large as the changes it missed.
const changeLogSize = 1024

// changeLog is the recent changes, each with its own revision, and a
// broadcast channel closed at every append. Guarded by Store.mu.
type changeLog struct {
	epoch  string
	rev    uint64
	events []*statev1.WatchResponse // revisions rev-len(events)+1 .. rev
	wake   chan struct{}
	done   chan struct{}
}

func (l *changeLog) init(epoch string) {
	l.epoch = epoch
	l.wake = make(chan struct{})
	l.done = make(chan struct{})
}

// append numbers the events, keeps them and wakes the watchers. It returns
// the last revision.
func (l *changeLog) append(events []*statev1.WatchResponse) uint64 {
	for _, ev := range events {
		l.rev++
		ev.Epoch, ev.Revision = l.epoch, l.rev
	}
	l.events = append(l.events, events...)
	if n := len(l.events); n > 2*changeLogSize {
		l.events = append([]*statev1.WatchResponse(nil), l.events[n-changeLogSize:]...)
	}
	close(l.wake)
	l.wake = make(chan struct{})
	return l.rev
}

// since returns the events after rev, or ok=false when they are no longer
// all kept.
func (l *changeLog) since(rev uint64) (events []*statev1.WatchResponse, ok bool) {
	first := l.rev - uint64(len(l.events)) // revision before the oldest kept
	if rev < first || rev > l.rev {
		return nil, false
	}
	return l.events[rev-first:], true
}

func (l *changeLog) close() { close(l.done) }

// Watch sends the changes to both tables to send until ctx is done or send
// fails. A watcher that passes the epoch and revision of the last event it
// applied gets every change after it. Otherwise (a fresh watcher, a
// restarted store, or one that fell more than the log behind) it gets
// EVENT_TYPE_RESET, then every row as an EVENT_TYPE_UPSERT with revision 0,
// then EVENT_TYPE_SYNCED carrying the revision to resume from. Catching up
// also ends with EVENT_TYPE_SYNCED. The events are shared: send must not
// modify them.
func (s *Store) Watch(ctx context.Context, epoch string, rev uint64, send func(*statev1.WatchResponse) error) error {
	synced := false
	for {
		batch, wake, err := s.nextBatch(epoch, rev, !synced)
		if err != nil {
			return err
		}
		for _, ev := range batch {
			if err := send(ev); err != nil {
				return err
			}
		}
		// A batch brings the watcher to the head of the log.
		if n := len(batch); n > 0 {
			epoch, rev = batch[n-1].GetEpoch(), batch[n-1].GetRevision()
		}
		synced = true
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.changes.done:
			return ErrClosed
		case <-wake:
		}
	}
}

// nextBatch returns what a watcher at (epoch, rev) is missing, a snapshot
// when that cannot be resumed, and the channel that is closed at the next
// change. With markSynced, the batch ends with EVENT_TYPE_SYNCED.
func (s *Store) nextBatch(epoch string, rev uint64, markSynced bool) ([]*statev1.WatchResponse, <-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, ErrClosed
	}
	l := &s.changes
	batch, ok := l.since(rev)
	if ok && len(batch) == 0 && !markSynced {
		return nil, l.wake, nil
	}
	if epoch != l.epoch || !ok {
		batch = s.snapshotLocked()
		markSynced = true
	} else {
		batch = append([]*statev1.WatchResponse(nil), batch...)
	}
	if markSynced {
		batch = append(batch, &statev1.WatchResponse{
			Epoch: l.epoch, Revision: l.rev, Type: statev1.EventType_EVENT_TYPE_SYNCED})
	}
	return batch, l.wake, nil
}

func (s *Store) snapshotLocked() []*statev1.WatchResponse {
	txn := s.db.ReadTxn()
	out := []*statev1.WatchResponse{{Epoch: s.changes.epoch, Type: statev1.EventType_EVENT_TYPE_RESET}}
	for r := range s.devices.All(txn) {
		out = append(out, &statev1.WatchResponse{Epoch: s.changes.epoch, Type: statev1.EventType_EVENT_TYPE_UPSERT,
			Object: &statev1.WatchResponse_Device{Device: r.Device}})
	}
	for r := range s.allocs.All(txn) {
		out = append(out, &statev1.WatchResponse{Epoch: s.changes.epoch, Type: statev1.EventType_EVENT_TYPE_UPSERT,
			Object: &statev1.WatchResponse_Allocation{Allocation: r.Allocation}})
	}
	return out
}
