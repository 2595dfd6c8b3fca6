package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// queueWrites starts one BeginPrepare for each of rows, in order, while the
// test holds s.mu: each is queued before the next starts. It returns their
// outcomes, in rows' order, once the test released s.mu.
func queueWrites(t *testing.T, s *Store, rows []*statev1.Allocation) []chan result {
	t.Helper()
	out := make([]chan result, len(rows))
	for i, a := range rows {
		out[i] = make(chan result, 1)
		go func() {
			r, err := s.BeginPrepare(&statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{a}})
			out[i] <- result{r.GetRevision(), err}
		}()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			s.qmu.Lock()
			n := len(s.queue)
			s.qmu.Unlock()
			if n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("write %d was not queued", i)
			}
		}
	}
	return out
}

type result struct {
	rev uint64
	err error
}

// Writes queued while another holds the store commit as one group, in one
// file transaction, each as if alone and in the order they queued: each
// gets its own revision, one that fails (a device another claim of the
// group holds) writes nothing and the others are written anyway, and
// everything the group wrote is in the file.
func TestWrite_GroupCommitsQueuedWrites(t *testing.T) {
	s := openTest(t)
	var rows []*statev1.Allocation
	for i := range 8 {
		rows = append(rows, shareRow(fmt.Sprintf("c%d", i), ""))
		rows[i].DeviceName = fmt.Sprintf("dev%d", i)
	}
	thief := shareRow("thief", "")
	thief.DeviceName = "dev3"
	rows = append(rows[:5:5], append([]*statev1.Allocation{thief}, rows[5:]...)...)

	s.mu.Lock()
	commits := s.file.commits
	outs := queueWrites(t, s, rows)
	s.mu.Unlock()

	var last uint64
	for i, ch := range outs {
		r := <-ch
		if rows[i] == thief {
			if !errors.Is(r.err, ErrConflict) {
				t.Fatalf("the write of a device an earlier write of the group holds: %v, want ErrConflict", r.err)
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("write %d (%s): %v", i, rows[i].GetClaimUid(), r.err)
		}
		if r.rev <= last {
			t.Fatalf("write %d got revision %d after %d: the revisions do not follow the queue", i, r.rev, last)
		}
		last = r.rev
	}
	s.mu.Lock()
	got := s.file.commits - commits
	s.mu.Unlock()
	if got != 1 {
		t.Fatalf("the group took %d file transactions, want 1", got)
	}

	// What the group wrote is in the file; the refused write is not.
	path := s.file.db.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	dump := again.Dump()
	if len(dump.GetAllocations()) != 8 {
		t.Fatalf("the file holds %d allocations, want 8", len(dump.GetAllocations()))
	}
	for _, a := range dump.GetAllocations() {
		if a.GetClaimUid() == "thief" {
			t.Fatalf("the refused write is in the file: %v", a)
		}
	}
}

// Writes queued when the store closes end with ErrClosed and write nothing.
func TestWrite_QueuedWritesOfAClosedStore(t *testing.T) {
	s := openTest(t)
	s.mu.Lock()
	outs := queueWrites(t, s, []*statev1.Allocation{shareRow("c1", ""), shareRow("c2", "")})
	s.closed = true
	commits := s.file.commits
	s.mu.Unlock()
	for _, ch := range outs {
		if r := <-ch; !errors.Is(r.err, ErrClosed) {
			t.Fatalf("a write queued as the store closed: %v, want ErrClosed", r.err)
		}
	}
	if s.file.commits != commits {
		t.Fatal("a write queued as the store closed reached the file")
	}
}
