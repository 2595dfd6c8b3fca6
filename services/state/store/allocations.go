package store

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/cilium/statedb"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// Allocation phases, short.
const (
	preparing     = statev1.Phase_PHASE_PREPARING
	prepared      = statev1.Phase_PHASE_PREPARED
	attached      = statev1.Phase_PHASE_ATTACHED
	freeingFailed = statev1.Phase_PHASE_FREEING_FAILED
)

// BeginPrepare records an intent (PREPARING) for each of a claim's devices,
// all or none. A device held by another claim, in any pool, is ErrConflict.
// Rows the same claim already has are returned as they are, so a repeated
// prepare sees how far the first one got.
func (s *Store) BeginPrepare(req *statev1.BeginPrepareRequest) (*statev1.BeginPrepareResponse, error) {
	allocs := req.GetAllocations()
	if len(allocs) == 0 {
		return nil, fieldErr("allocations", "required")
	}
	devices := map[string]bool{}
	for i, a := range allocs {
		f := indexed("allocations", i)
		if err := validAllocation(f, a); err != nil {
			return nil, err
		}
		if a.GetClaimUid() != allocs[0].GetClaimUid() {
			return nil, fieldErr(f+".claimUid", "%q differs from allocations[0]'s %q: one claim per call", a.GetClaimUid(), allocs[0].GetClaimUid())
		}
		if k := a.GetDeviceName() + "/" + a.GetShareId(); devices[k] {
			return nil, fieldErr(f+".deviceName", "%q appears twice", a.GetDeviceName())
		}
		devices[a.GetDeviceName()+"/"+a.GetShareId()] = true
		if a.GetPhase() != statev1.Phase_PHASE_UNSPECIFIED || a.GetPreparedDevice() != nil {
			return nil, fieldErr(f, "phase and preparedDevice are set by the service")
		}
	}
	out := &statev1.BeginPrepareResponse{}
	rev, err := s.write(func(w *writer) error {
		out.Allocations = nil
		for i, a := range allocs {
			row, err := w.beginPrepare(a)
			if err != nil {
				return fielderr.Prefix(indexed("allocations", i), err)
			}
			out.Allocations = append(out.Allocations, row)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.Revision = rev
	return out, nil
}

func (w *writer) beginPrepare(a *statev1.Allocation) (*statev1.Allocation, error) {
	if row, ok, err := w.held(a); ok || err != nil {
		return row, err
	}
	row := proto.CloneOf(a)
	row.Phase = preparing
	clearAttachFailure(row)
	if err := w.assignAddresses(row); err != nil {
		return nil, err
	}
	return row, w.putAlloc(row)
}

// held returns the row a's claim already has for a's device (ok), or
// ErrConflict when another claim, or another pool, holds the device. A
// shared device's rows (a share ID each) are each other's conflict only
// when their share IDs are the same (the scheduler accounts for the
// capacity); one claim's row without a share ID holds the device whole.
func (w *writer) held(a *statev1.Allocation) (row *statev1.Allocation, ok bool, err error) {
	for h := range w.s.allocs.List(w.txn, allocDevIndex.Query(a.GetDeviceName())) {
		if err := shareConflict(h.Allocation, a); err != nil {
			return nil, false, err
		}
		if h.GetShareId() != a.GetShareId() {
			continue // another share of the shared device
		}
		if h.GetClaimUid() != a.GetClaimUid() {
			return nil, false, fmt.Errorf("device %s is allocated to claim %s in pool %s: %w",
				a.GetDeviceName(), h.GetClaimUid(), h.GetPool(), ErrConflict)
		}
		if h.GetPool() != a.GetPool() {
			return nil, false, fmt.Errorf("device %s is allocated to this claim in pool %s, not %s: %w",
				a.GetDeviceName(), h.GetPool(), a.GetPool(), ErrConflict)
		}
		return h.Allocation, true, nil
	}
	return nil, false, nil
}

// shareConflict refuses a, a new allocation, beside h, a row of the same
// device, when one has a share ID and the other not: a device is shared
// by bandwidth or held whole, never both.
func shareConflict(h, a *statev1.Allocation) error {
	if (h.GetShareId() == "") == (a.GetShareId() == "") {
		return nil
	}
	if a.GetShareId() == "" {
		return fmt.Errorf("device %s is shared (claim %s holds share %s), it cannot be allocated whole: %w",
			a.GetDeviceName(), h.GetClaimUid(), h.GetShareId(), ErrConflict)
	}
	return fmt.Errorf("device %s is allocated whole to claim %s, it cannot be shared: %w",
		a.GetDeviceName(), h.GetClaimUid(), ErrConflict)
}

// CommitPrepare stores each prepared device in its claim's row and moves it
// to PREPARED, all or none. Rows must be the claim's and PREPARING; an
// already PREPARED row is left as it is (idempotent).
func (s *Store) CommitPrepare(req *statev1.CommitPrepareRequest) (*statev1.CommitPrepareResponse, error) {
	rev, err := s.storePrepared(req.GetClaimUid(), req.GetAllocations(), prepared)
	if err != nil {
		return nil, err
	}
	return &statev1.CommitPrepareResponse{Revision: rev}, nil
}

// RecordPrepared stores the prepared device of each of a claim's intents,
// all or none, keeping them PREPARING, so that a prepare interrupted before
// CommitPrepare can be undone with Free. Rows must be the claim's and
// PREPARING; an already PREPARED row is left as it is (idempotent, like
// CommitPrepare); another phase is ErrPhase.
func (s *Store) RecordPrepared(req *statev1.RecordPreparedRequest) (*statev1.RecordPreparedResponse, error) {
	rev, err := s.storePrepared(req.GetClaimUid(), req.GetAllocations(), preparing)
	if err != nil {
		return nil, err
	}
	return &statev1.RecordPreparedResponse{Revision: rev}, nil
}

// storePrepared stores each prepared device in its claim's PREPARING row
// and gives the row phase (PREPARED to commit, PREPARING to only record),
// all or none. A PREPARED row is left as it is; another phase is ErrPhase.
func (s *Store) storePrepared(claimUID string, allocs []*statev1.PreparedAllocation, phase statev1.Phase) (uint64, error) {
	if err := validPreparedAllocations(claimUID, allocs); err != nil {
		return 0, err
	}
	return s.write(func(w *writer) error {
		for _, p := range allocs {
			row, err := w.claimRow(keyFromProto(p.GetKey()), claimUID)
			if err != nil {
				return err
			}
			switch row.GetPhase() {
			case prepared:
				continue
			case preparing:
			default:
				return fmt.Errorf("allocation %s is %s, not PREPARING: %w", KeyOf(row), row.GetPhase(), ErrPhase)
			}
			if row.GetPhase() == phase && proto.Equal(row.GetPreparedDevice(), p.GetPreparedDevice()) {
				continue
			}
			row = shallowCopy(row)
			row.Phase, row.PreparedDevice = phase, p.GetPreparedDevice()
			if err := w.putAlloc(row); err != nil {
				return err
			}
		}
		return nil
	})
}

// validPreparedAllocations checks the claim UID and the prepared devices of
// a CommitPrepare or RecordPrepared request.
func validPreparedAllocations(claimUID string, allocs []*statev1.PreparedAllocation) error {
	if err := validUID("claimUid", claimUID, true); err != nil {
		return err
	}
	if len(allocs) == 0 {
		return fieldErr("allocations", "required")
	}
	for i, p := range allocs {
		f := indexed("allocations", i)
		if err := validKey(f+".key", p.GetKey()); err != nil {
			return err
		}
		if err := validPrepared(f+".preparedDevice", p.GetPreparedDevice(), p.GetKey().GetDeviceName()); err != nil {
			return err
		}
	}
	return nil
}

// AbortPrepare deletes a claim's uncommitted intents. Missing rows are
// fine; a row that is past PREPARING is ErrPhase and nothing is deleted.
func (s *Store) AbortPrepare(req *statev1.AbortPrepareRequest) (*statev1.AbortPrepareResponse, error) {
	if err := validUID("claimUid", req.GetClaimUid(), true); err != nil {
		return nil, err
	}
	for i, k := range req.GetKeys() {
		if err := validKey(indexed("keys", i), k); err != nil {
			return nil, err
		}
	}
	rev, err := s.write(func(w *writer) error {
		for _, k := range req.GetKeys() {
			row, err := w.claimRow(keyFromProto(k), req.GetClaimUid())
			if err != nil {
				if errorsIsNotFound(err) {
					continue
				}
				return err
			}
			if row.GetPhase() != preparing {
				return fmt.Errorf("allocation %s is %s, not PREPARING: %w", KeyOf(row), row.GetPhase(), ErrPhase)
			}
			if err := w.deleteAlloc(row); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &statev1.AbortPrepareResponse{Revision: rev}, nil
}

// RestoreAllocations re-creates PREPARED rows from the claims' status after
// the file was lost. A row the same claim already has is kept; a device held
// by another claim is ErrConflict and nothing is written.
func (s *Store) RestoreAllocations(req *statev1.RestoreAllocationsRequest) (*statev1.RestoreAllocationsResponse, error) {
	for i, a := range req.GetAllocations() {
		f := indexed("allocations", i)
		if err := validAllocation(f, a); err != nil {
			return nil, err
		}
		if err := validPrepared(f+".preparedDevice", a.GetPreparedDevice(), a.GetDeviceName()); err != nil {
			return nil, err
		}
	}
	out := &statev1.RestoreAllocationsResponse{}
	rev, err := s.write(func(w *writer) error {
		out.Restored = 0
		for _, a := range req.GetAllocations() {
			row, ok, err := w.held(a)
			if err != nil {
				return err
			}
			if ok && row.GetPhase() != preparing {
				continue
			}
			row = proto.CloneOf(a)
			row.Phase, row.LastError, row.Attempts, row.NetnsPath = prepared, "", 0, ""
			clearAttachFailure(row)
			if err := w.putAlloc(row); err != nil {
				return err
			}
			out.Restored++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.Revision = rev
	return out, nil
}

// ListAllocations returns the allocations matching every set field of the
// filter, in key order.
func (s *Store) ListAllocations(req *statev1.ListAllocationsRequest) (*statev1.ListAllocationsResponse, error) {
	if _, ok := statev1.Phase_name[int32(req.GetPhase())]; !ok {
		return nil, fieldErr("phase", "unknown phase %d", req.GetPhase())
	}
	txn := s.db.ReadTxn()
	var rows iter.Seq2[allocRow, statedb.Revision]
	switch {
	case req.GetClaimUid() != "":
		rows = s.allocs.List(txn, allocClaimIndex.Query(req.GetClaimUid()))
	case req.GetPodUid() != "":
		rows = s.allocs.List(txn, allocPodIndex.Query(req.GetPodUid()))
	case req.GetDeviceName() != "":
		rows = s.allocs.List(txn, allocDevIndex.Query(req.GetDeviceName()))
	default:
		rows = s.allocs.All(txn)
	}
	out := &statev1.ListAllocationsResponse{}
	for r := range rows {
		if matches(req, r.Allocation) {
			out.Allocations = append(out.Allocations, r.Allocation)
		}
	}
	slices.SortFunc(out.Allocations, func(a, b *statev1.Allocation) int {
		return compareKeys(KeyOf(a), KeyOf(b))
	})
	return out, nil
}

func matches(f *statev1.ListAllocationsRequest, a *statev1.Allocation) bool {
	return (f.GetClaimUid() == "" || f.GetClaimUid() == a.GetClaimUid()) &&
		(f.GetPodUid() == "" || f.GetPodUid() == a.GetPodUid()) &&
		(f.GetDeviceName() == "" || f.GetDeviceName() == a.GetDeviceName()) &&
		(f.GetPhase() == statev1.Phase_PHASE_UNSPECIFIED || f.GetPhase() == a.GetPhase())
}

func compareKeys(a, b Key) int {
	return cmp.Or(strings.Compare(a.Pool, b.Pool), strings.Compare(a.Device, b.Device), strings.Compare(a.Share, b.Share))
}
