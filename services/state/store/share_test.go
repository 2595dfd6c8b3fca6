package store

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

func shareRow(claim, share string) *statev1.Allocation {
	return &statev1.Allocation{Pool: "pool-a", DeviceName: "mv", ShareId: share, Manager: devicev1.DeviceManager_DEVICE_MANAGER_SUBIF,
		ClaimUid: claim, ClaimNamespace: "default", ClaimName: claim, PodUid: "pod-" + claim}
}

func begin(s *Store, a *statev1.Allocation) error {
	_, err := s.BeginPrepare(&statev1.BeginPrepareRequest{Allocations: []*statev1.Allocation{a}})
	return err
}

// A shared device's rows are keyed by share: two claims hold shares of one
// device at once, each with a row of its own that survives a restart; the
// same share for another claim, the device whole beside shares, or shares
// beside a whole allocation are conflicts, and nothing is written.
func TestSharesOfOneDevice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []*statev1.Allocation{shareRow("c1", "0b1e-s1"), shareRow("c2", "0b1e-s2")} {
		if err := begin(s, a); err != nil {
			t.Fatalf("share %s: %v", a.GetShareId(), err)
		}
	}
	if err := begin(s, shareRow("c1", "0b1e-s1")); err != nil {
		t.Fatalf("a repeated begin of the same share is not idempotent: %v", err)
	}
	for name, a := range map[string]*statev1.Allocation{
		"same share, other claim": shareRow("c3", "0b1e-s1"),
		"whole beside shares":     shareRow("c3", ""),
	} {
		if err := begin(s, a); !errors.Is(err, ErrConflict) {
			t.Errorf("%s: got %v, want ErrConflict", name, err)
		}
	}
	rows, err := s.ListAllocations(&statev1.ListAllocationsRequest{DeviceName: "mv"})
	if err != nil || len(rows.GetAllocations()) != 2 {
		t.Fatalf("rows of the shared device: %v, %v; want the two shares", rows.GetAllocations(), err)
	}
	if got := KeyOf(rows.GetAllocations()[0]).String(); got != "pool-a/mv/0b1e-s1" {
		t.Errorf("key %q, want pool-a/mv/0b1e-s1", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, nil); err != nil {
		t.Fatalf("reopening: %v", err)
	}
	defer s.Close()
	rows, _ = s.ListAllocations(&statev1.ListAllocationsRequest{DeviceName: "mv"})
	if len(rows.GetAllocations()) != 2 {
		t.Fatalf("after a restart: %d rows, want 2", len(rows.GetAllocations()))
	}
}

func TestWholeRefusesShares(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := begin(s, shareRow("c1", "")); err != nil {
		t.Fatal(err)
	}
	if err := begin(s, shareRow("c2", "s2")); !errors.Is(err, ErrConflict) {
		t.Errorf("a share of a device held whole: got %v, want ErrConflict", err)
	}
	err = begin(s, shareRow("c3", "Not/A-Share"))
	if err == nil || !strings.Contains(err.Error(), "allocations[0].shareId") {
		t.Errorf("a bad share ID: got %v, want an error naming allocations[0].shareId", err)
	}
}
