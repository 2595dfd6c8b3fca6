package store

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// claimRow returns the row at k, ErrNotFound when there is none, and
// ErrConflict when claimUID is set and the row is another claim's.
func (w *writer) claimRow(k Key, claimUID string) (*statev1.Allocation, error) {
	row, ok := w.alloc(k)
	if !ok {
		return nil, fmt.Errorf("allocation %s: %w", k, ErrNotFound)
	}
	if claimUID != "" && row.GetClaimUid() != claimUID {
		return nil, fmt.Errorf("allocation %s belongs to claim %s, not %s: %w", k, row.GetClaimUid(), claimUID, ErrConflict)
	}
	return row, nil
}

func errorsIsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// update applies change to a copy of the row at k (shallowCopy: change
// sets whole fields, never changes a message or list of the row) and
// writes it. change returns an error to refuse the update.
func (s *Store) update(k Key, change func(row *statev1.Allocation) error) (*statev1.Allocation, uint64, error) {
	var out *statev1.Allocation
	rev, err := s.write(func(w *writer) error {
		row, err := w.claimRow(k, "")
		if err != nil {
			return err
		}
		row = shallowCopy(row)
		if err := change(row); err != nil {
			return err
		}
		out = row
		return w.putAlloc(row)
	})
	return out, rev, err
}

func wrongPhase(row *statev1.Allocation, want string) error {
	return fmt.Errorf("allocation %s is %s, not %s: %w", KeyOf(row), row.GetPhase(), want, ErrPhase)
}

// MarkAttached records that a PREPARED (or already ATTACHED) device is in
// the pod netns at req.NetnsPath, with the prepared device as Attach left it
// when given, and clears the row's attach failure. Another phase is
// ErrPhase.
func (s *Store) MarkAttached(req *statev1.MarkAttachedRequest) (*statev1.MarkAttachedResponse, error) {
	if err := validKey("key", req.GetKey()); err != nil {
		return nil, err
	}
	if err := validUID("podUid", req.GetPodUid(), false); err != nil {
		return nil, err
	}
	if err := validNetns("netnsPath", req.GetNetnsPath()); err != nil {
		return nil, err
	}
	if pd := req.GetPreparedDevice(); pd != nil {
		if err := validPrepared("preparedDevice", pd, req.GetKey().GetDeviceName()); err != nil {
			return nil, err
		}
	}
	_, rev, err := s.update(keyFromProto(req.GetKey()), func(row *statev1.Allocation) error {
		if p := row.GetPhase(); p != prepared && p != attached {
			return wrongPhase(row, "PREPARED")
		}
		row.Phase, row.NetnsPath = attached, req.GetNetnsPath()
		if req.GetPodUid() != "" {
			row.PodUid = req.GetPodUid()
		}
		if pd := req.GetPreparedDevice(); pd != nil {
			row.PreparedDevice = pd
		}
		clearAttachFailure(row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &statev1.MarkAttachedResponse{Revision: rev}, nil
}

// MaxAttachError bounds the attach error a row keeps, in bytes: a longer
// one is cut at a character boundary, so that a runaway message neither
// grows the file nor the watch events.
const MaxAttachError = 4096

// MarkAttachFailed records on a PREPARED or ATTACHED row that an attach
// into a pod's netns failed: req.Error (required, cut to MaxAttachError),
// one more failure counted, and the time now. The phase and netns are
// left as they are. Another phase is ErrPhase.
func (s *Store) MarkAttachFailed(req *statev1.MarkAttachFailedRequest) (*statev1.MarkAttachFailedResponse, error) {
	if err := validKey("key", req.GetKey()); err != nil {
		return nil, err
	}
	if req.GetError() == "" {
		return nil, fieldErr("error", "required")
	}
	msg := cutUTF8(req.GetError(), MaxAttachError)
	now := timestamppb.New(time.Now())
	row, rev, err := s.update(keyFromProto(req.GetKey()), func(row *statev1.Allocation) error {
		if p := row.GetPhase(); p != prepared && p != attached {
			return wrongPhase(row, "PREPARED or ATTACHED")
		}
		row.AttachError, row.AttachFailedAt = msg, now
		row.AttachFailures++
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &statev1.MarkAttachFailedResponse{AttachFailures: row.GetAttachFailures(), Revision: rev}, nil
}

// clearAttachFailure drops row's record of failed attaches.
func clearAttachFailure(row *statev1.Allocation) {
	row.AttachError, row.AttachFailures, row.AttachFailedAt = "", 0, nil
}

// cutUTF8 is s cut to at most n bytes, at a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// MarkDetached moves an ATTACHED device back to PREPARED. A PREPARED one is
// left as it is; another phase is ErrPhase. With req.PodUid, a row
// recorded for another pod is left as it is: ErrConflict (the device is
// that pod's now, and this detach came late).
func (s *Store) MarkDetached(req *statev1.MarkDetachedRequest) (*statev1.MarkDetachedResponse, error) {
	if err := validKey("key", req.GetKey()); err != nil {
		return nil, err
	}
	if err := validUID("podUid", req.GetPodUid(), false); err != nil {
		return nil, err
	}
	_, rev, err := s.update(keyFromProto(req.GetKey()), func(row *statev1.Allocation) error {
		if pod := req.GetPodUid(); pod != "" && row.GetPodUid() != "" && row.GetPodUid() != pod {
			return fmt.Errorf("allocation %s is pod %s's, not %s: %w", KeyOf(row), row.GetPodUid(), pod, ErrConflict)
		}
		switch row.GetPhase() {
		case attached, prepared:
			row.Phase, row.NetnsPath = prepared, ""
			return nil
		}
		return wrongPhase(row, "ATTACHED")
	})
	if err != nil {
		return nil, err
	}
	return &statev1.MarkDetachedResponse{Revision: rev}, nil
}

// MarkFreeFailed keeps the row as FREEING_FAILED with the error and one more
// attempt counted, whatever its phase.
func (s *Store) MarkFreeFailed(req *statev1.MarkFreeFailedRequest) (*statev1.MarkFreeFailedResponse, error) {
	if err := validKey("key", req.GetKey()); err != nil {
		return nil, err
	}
	if req.GetError() == "" {
		return nil, fieldErr("error", "required")
	}
	row, rev, err := s.update(keyFromProto(req.GetKey()), func(row *statev1.Allocation) error {
		row.Phase, row.LastError = freeingFailed, req.GetError()
		row.Attempts++
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &statev1.MarkFreeFailedResponse{Attempts: row.GetAttempts(), Revision: rev}, nil
}

// DeleteAllocation removes the row at req.Key. A missing row is fine; a row
// of another claim than req.ClaimUid (when set) is ErrConflict.
func (s *Store) DeleteAllocation(req *statev1.DeleteAllocationRequest) (*statev1.DeleteAllocationResponse, error) {
	if err := validKey("key", req.GetKey()); err != nil {
		return nil, err
	}
	if err := validUID("claimUid", req.GetClaimUid(), false); err != nil {
		return nil, err
	}
	rev, err := s.write(func(w *writer) error {
		row, err := w.claimRow(keyFromProto(req.GetKey()), req.GetClaimUid())
		if errorsIsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return w.deleteAlloc(row)
	})
	if err != nil {
		return nil, err
	}
	return &statev1.DeleteAllocationResponse{Revision: rev}, nil
}

// Dump returns both tables in key order, with the epoch and revision they
// are at.
func (s *Store) Dump() *statev1.DumpResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &statev1.DumpResponse{Epoch: s.changes.epoch, Revision: s.changes.rev}
	txn := s.db.ReadTxn()
	for r := range s.devices.All(txn) {
		out.Devices = append(out.Devices, r.Device)
	}
	for r := range s.allocs.All(txn) {
		out.Allocations = append(out.Allocations, r.Allocation)
	}
	out.IpPools = s.poolStatusLocked(s.leasesLocked(txn, s.pools))
	return out
}
