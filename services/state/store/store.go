// Package store keeps the state service's two tables: devices (what each
// device manager reports now) and allocations (what was prepared, for which
// claim and pod). Both live in memory in cilium/statedb; the allocations are
// written through to a bbolt file and reloaded at Open, so a restart loses
// nothing. Every write is atomic: the file transaction commits first, then
// the in-memory one, and a failure leaves both as they were. Every change
// gets a revision and goes to watchers (see Watch).
package store

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cilium/statedb"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// Store is the state service's tables. It is safe for concurrent use.
type Store struct {
	log     *slog.Logger
	db      *statedb.DB
	devices statedb.RWTable[deviceRow]
	allocs  statedb.RWTable[allocRow]
	file    *file
	// pools are the address pools (see ippools.go), guarded by mu.
	pools map[string]*ipPool

	// mu serializes writes, so revisions follow commit order.
	mu      sync.Mutex
	closed  bool
	changes changeLog
	// queue is the writes waiting for mu, guarded by qmu (see write).
	qmu   sync.Mutex
	queue []*queuedWrite
}

// Open loads the allocations from the bbolt file at path (created 0600
// when missing) and returns a store serving them. A fresh random epoch
// tells watchers that revisions from before this Open cannot be resumed.
//
// The file is checked before anything is served from it (checkFile: a
// regular file of this uid that no one else may write, in a directory
// others cannot write; bbolt's consistency check; every row as the
// requests that wrote it were checked). What fails is an error naming the
// file and what is wrong, ErrCorrupt for its content, ErrSchema for a
// file of another schema (a newer release's), and nothing is
// loaded: the service refuses to start rather than serve part of its
// state.
func Open(path string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	db := statedb.New()
	devices, err := statedb.NewTable(db, devicesTableName, deviceNameIndex, deviceManagerIndex)
	if err != nil {
		return nil, err
	}
	allocs, err := statedb.NewTable(db, allocationsTableName, allocKeyIndex, allocClaimIndex, allocPodIndex, allocDevIndex)
	if err != nil {
		return nil, err
	}
	if err := checkFile(path, log); err != nil {
		return nil, err
	}
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	rows, pools, err := f.loadAll(path)
	if err != nil {
		_ = f.close()
		return nil, err
	}
	txn := db.WriteTxn(allocs)
	for _, a := range rows {
		if _, _, err := allocs.Insert(txn, allocRow{a}); err != nil {
			txn.Abort()
			_ = f.close()
			return nil, corrupt(path, fmt.Errorf("allocation %s: %w", KeyOf(a), err))
		}
	}
	txn.Commit()
	s := &Store{log: log, db: db, devices: devices, allocs: allocs, file: f, pools: pools}
	s.changes.init(newEpoch())
	log.Info("state loaded", "file", path, "allocations", len(rows), "epoch", s.changes.epoch)
	return s, nil
}

// loadAll reads the allocations and the address pools of the file at
// path; an error is ErrCorrupt.
func (f *file) loadAll(path string) ([]*statev1.Allocation, map[string]*ipPool, error) {
	rows, err := f.load()
	if err != nil {
		return nil, nil, corrupt(path, err)
	}
	pools, err := f.loadPools()
	if err != nil {
		return nil, nil, corrupt(path, err)
	}
	return rows, pools, nil
}

func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Close closes the file and ends every watch. Idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.changes.close()
	return s.file.close()
}

// Revision returns the store's epoch and the revision of its last change.
func (s *Store) Revision() (epoch string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changes.epoch, s.changes.rev
}

// writer is one write transaction across both tables. It records what
// changed, for the file and for watchers.
type writer struct {
	s      *Store
	txn    statedb.WriteTxn
	events []*statev1.WatchResponse
	// file holds the final value of each allocation written; nil deletes.
	file  map[Key]*statev1.Allocation
	order []Key
}

// write runs fn in one transaction. When fn fails, nothing is written. When
// it succeeds, the allocation changes are made durable, then the tables
// commit and watchers are woken. It returns the revision after the write.
//
// Writes are committed in groups: whoever holds mu next commits every
// write queued meanwhile in one file transaction, one fsync pair for all,
// so that a pod's devices' MarkAttached, which come at once, do not wait
// on the disk one after the other. The group runs the writes in the order
// they queued, each as if alone: one that fails is dropped and the others
// run again without it (a write's fn depends only on the tables and its
// request), so a group changes nothing a write sees or returns, but when
// it returns.
func (s *Store) write(fn func(w *writer) error) (uint64, error) {
	c := &queuedWrite{fn: fn, done: make(chan struct{})}
	s.qmu.Lock()
	s.queue = append(s.queue, c)
	s.qmu.Unlock()
	s.mu.Lock()
	s.qmu.Lock()
	group := s.queue
	s.queue = nil
	s.qmu.Unlock()
	// An earlier holder of mu may have committed c already (group is
	// empty or has later writes).
	if len(group) > 0 {
		s.commitLocked(group)
	}
	s.mu.Unlock()
	<-c.done
	return c.rev, c.err
}

// queuedWrite is one write waiting for its group's commit.
type queuedWrite struct {
	fn   func(w *writer) error
	rev  uint64
	err  error
	done chan struct{}
}

func (c *queuedWrite) end(rev uint64, err error) {
	c.rev, c.err = rev, err
	close(c.done)
}

// commitLocked commits group, under mu. See write.
func (s *Store) commitLocked(group []*queuedWrite) {
	for len(group) > 0 {
		if s.closed {
			for _, c := range group {
				c.end(0, ErrClosed)
			}
			return
		}
		w := &writer{s: s, txn: s.db.WriteTxn(s.devices, s.allocs), file: map[Key]*statev1.Allocation{}}
		ends := make([]int, len(group)) // each write's events end at w.events[ends[i]]
		failed := -1
		for i, c := range group {
			if err := c.fn(w); err != nil {
				c.end(0, err)
				failed = i
				break
			}
			ends[i] = len(w.events)
		}
		if failed >= 0 {
			w.txn.Abort()
			group = append(group[:failed:failed], group[failed+1:]...)
			continue
		}
		if err := s.file.apply(w.fileChanges()); err != nil {
			w.txn.Abort()
			for _, c := range group {
				c.end(0, fmt.Errorf("writing allocations: %w", err))
			}
			return
		}
		if len(w.events) == 0 {
			w.txn.Abort() // nothing changed
		} else {
			w.txn.Commit()
		}
		start := 0
		for i, c := range group {
			rev := s.changes.rev
			if ends[i] > start {
				rev = s.changes.append(w.events[start:ends[i]])
			}
			start = ends[i]
			c.end(rev, nil)
		}
		return
	}
}

// fileChanges are the allocations to put in the file and the keys to
// delete from it, in the order they were first written.
func (w *writer) fileChanges() (puts []*statev1.Allocation, dels []Key) {
	for _, k := range w.order {
		if a := w.file[k]; a != nil {
			puts = append(puts, a)
		} else {
			dels = append(dels, k)
		}
	}
	return puts, dels
}

func (w *writer) putDevice(d *devicev1.Device) error {
	if _, _, err := w.s.devices.Insert(w.txn, deviceRow{d}); err != nil {
		return err
	}
	w.events = append(w.events, &statev1.WatchResponse{
		Type: statev1.EventType_EVENT_TYPE_UPSERT, Object: &statev1.WatchResponse_Device{Device: d}})
	return nil
}

func (w *writer) deleteDevice(d *devicev1.Device) error {
	if _, _, err := w.s.devices.Delete(w.txn, deviceRow{d}); err != nil {
		return err
	}
	w.events = append(w.events, &statev1.WatchResponse{
		Type: statev1.EventType_EVENT_TYPE_DELETE, Object: &statev1.WatchResponse_Device{Device: d}})
	return nil
}

func (w *writer) putAlloc(a *statev1.Allocation) error {
	if _, _, err := w.s.allocs.Insert(w.txn, allocRow{a}); err != nil {
		return err
	}
	w.record(KeyOf(a), a)
	w.events = append(w.events, &statev1.WatchResponse{
		Type: statev1.EventType_EVENT_TYPE_UPSERT, Object: &statev1.WatchResponse_Allocation{Allocation: a}})
	return nil
}

func (w *writer) deleteAlloc(a *statev1.Allocation) error {
	if _, _, err := w.s.allocs.Delete(w.txn, allocRow{a}); err != nil {
		return err
	}
	w.record(KeyOf(a), nil)
	w.events = append(w.events, &statev1.WatchResponse{
		Type: statev1.EventType_EVENT_TYPE_DELETE, Object: &statev1.WatchResponse_Allocation{Allocation: a}})
	return nil
}

func (w *writer) record(k Key, a *statev1.Allocation) {
	if _, seen := w.file[k]; !seen {
		w.order = append(w.order, k)
	}
	w.file[k] = a
}

// alloc returns the allocation at k as this transaction sees it.
func (w *writer) alloc(k Key) (*statev1.Allocation, bool) {
	r, _, ok := w.s.allocs.Get(w.txn, allocKeyIndex.Query(k))
	return r.Allocation, ok
}
