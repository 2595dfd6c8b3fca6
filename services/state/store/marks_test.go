package store

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

func openStore(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func row(t *testing.T, s *Store, device string) *statev1.Allocation {
	t.Helper()
	resp, err := s.ListAllocations(&statev1.ListAllocationsRequest{DeviceName: device})
	if err != nil || len(resp.GetAllocations()) != 1 {
		t.Fatalf("ListAllocations(%s) = %v, %v; want one row", device, resp, err)
	}
	return resp.GetAllocations()[0]
}

// TestMarkAttachFailed: a failed attach is recorded on the row (the error,
// the failures counted, when) whatever its phase among PREPARED and
// ATTACHED, survives a restart, and the next MarkAttached clears it.
func TestMarkAttachFailed(t *testing.T) {
	path := stateFile(t, goodRow("dummy1"))
	s := openStore(t, path)
	key := &statev1.AllocationKey{Pool: "pool-a", DeviceName: "dummy1"}
	const cause = "vrf: this node's kernel has no VRF devices (CONFIG_NET_VRF): operation not supported"
	before := time.Now()
	for i := uint32(1); i <= 2; i++ {
		resp, err := s.MarkAttachFailed(&statev1.MarkAttachFailedRequest{Key: key, Error: cause})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetAttachFailures() != i {
			t.Errorf("attempt %d: attachFailures = %d", i, resp.GetAttachFailures())
		}
	}
	r := row(t, s, "dummy1")
	if r.GetAttachError() != cause || r.GetAttachFailures() != 2 || r.GetPhase() != prepared {
		t.Errorf("row after two failures: error %q, failures %d, phase %s", r.GetAttachError(), r.GetAttachFailures(), r.GetPhase())
	}
	if at := r.GetAttachFailedAt().AsTime(); at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("attachFailedAt = %s, want about now", at)
	}

	// Durable: a restarted service has it.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, path)
	if r := row(t, s, "dummy1"); r.GetAttachError() != cause || r.GetAttachFailures() != 2 || r.GetAttachFailedAt() == nil {
		t.Errorf("row after a restart: error %q, failures %d, at %v", r.GetAttachError(), r.GetAttachFailures(), r.GetAttachFailedAt())
	}

	if _, err := s.MarkAttached(&statev1.MarkAttachedRequest{Key: key, PodUid: "uid-pod", NetnsPath: "/var/run/netns/p1"}); err != nil {
		t.Fatal(err)
	}
	if r := row(t, s, "dummy1"); r.GetAttachError() != "" || r.GetAttachFailures() != 0 || r.GetAttachFailedAt() != nil || r.GetPhase() != attached {
		t.Errorf("row after MarkAttached: error %q, failures %d, at %v, phase %s", r.GetAttachError(), r.GetAttachFailures(), r.GetAttachFailedAt(), r.GetPhase())
	}

	// An attach into a newer sandbox of the pod fails: the row stays
	// ATTACHED, with the failure.
	if _, err := s.MarkAttachFailed(&statev1.MarkAttachFailedRequest{Key: key, Error: cause}); err != nil {
		t.Fatal(err)
	}
	if r := row(t, s, "dummy1"); r.GetAttachError() != cause || r.GetAttachFailures() != 1 || r.GetPhase() != attached || r.GetNetnsPath() != "/var/run/netns/p1" {
		t.Errorf("attached row after a failure: error %q, failures %d, phase %s, netns %q", r.GetAttachError(), r.GetAttachFailures(), r.GetPhase(), r.GetNetnsPath())
	}
}

// TestMarkAttachFailed_Refused: a request without an error or key is
// refused naming the field, a missing row is ErrNotFound, a row that is
// not prepared is ErrPhase; none of them changes the row.
func TestMarkAttachFailed_Refused(t *testing.T) {
	intent := goodRow("dummy2")
	intent.Phase, intent.PreparedDevice = preparing, nil
	s := openStore(t, stateFile(t, goodRow("dummy1"), intent))
	key := &statev1.AllocationKey{Pool: "pool-a", DeviceName: "dummy1"}
	var fe *fielderr.Error
	if _, err := s.MarkAttachFailed(&statev1.MarkAttachFailedRequest{Key: key}); !errors.As(err, &fe) || fe.Field != "error" {
		t.Errorf("no error: %v, want a field error naming error", err)
	}
	if _, err := s.MarkAttachFailed(&statev1.MarkAttachFailedRequest{Error: "boom"}); !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "key") {
		t.Errorf("no key: %v, want a field error naming key", err)
	}
	if _, err := s.MarkAttachFailed(&statev1.MarkAttachFailedRequest{Key: &statev1.AllocationKey{Pool: "pool-a", DeviceName: "dummy9"}, Error: "boom"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing row: %v, want ErrNotFound", err)
	}
	if _, err := s.MarkAttachFailed(&statev1.MarkAttachFailedRequest{Key: &statev1.AllocationKey{Pool: "pool-a", DeviceName: "dummy2"}, Error: "boom"}); !errors.Is(err, ErrPhase) {
		t.Errorf("PREPARING row: %v, want ErrPhase", err)
	}
	for _, d := range []string{"dummy1", "dummy2"} {
		if r := row(t, s, d); r.GetAttachError() != "" || r.GetAttachFailures() != 0 {
			t.Errorf("%s changed by refused requests: %q, %d", d, r.GetAttachError(), r.GetAttachFailures())
		}
	}
}

// TestMarkAttachFailed_LongError: an error longer than MaxAttachError is
// kept cut, at a character boundary.
func TestMarkAttachFailed_LongError(t *testing.T) {
	s := openStore(t, stateFile(t, goodRow("dummy1")))
	long := "routes[0]: " + strings.Repeat("é", MaxAttachError)
	if _, err := s.MarkAttachFailed(&statev1.MarkAttachFailedRequest{Key: &statev1.AllocationKey{Pool: "pool-a", DeviceName: "dummy1"}, Error: long}); err != nil {
		t.Fatal(err)
	}
	got := row(t, s, "dummy1").GetAttachError()
	if len(got) > MaxAttachError || !utf8.ValidString(got) || !strings.HasPrefix(got, "routes[0]: ") {
		t.Errorf("kept %d bytes (valid UTF-8: %v), want at most %d, cut at a character", len(got), utf8.ValidString(got), MaxAttachError)
	}
}

// TestMarkDetached_AnotherPodsRow: a detach that names the pod it came
// from leaves a row attached for another pod as it is (ErrConflict), and
// moves its own pod's row back to PREPARED; one without a pod does as
// before.
func TestMarkDetached_AnotherPodsRow(t *testing.T) {
	s := openStore(t, stateFile(t, goodRow("dummy1")))
	key := &statev1.AllocationKey{Pool: "pool-a", DeviceName: "dummy1"}
	attach := func() {
		t.Helper()
		if _, err := s.MarkAttached(&statev1.MarkAttachedRequest{Key: key, PodUid: "uid-new", NetnsPath: "/var/run/netns/p2"}); err != nil {
			t.Fatal(err)
		}
	}
	attach()
	if _, err := s.MarkDetached(&statev1.MarkDetachedRequest{Key: key, PodUid: "uid-old"}); !errors.Is(err, ErrConflict) {
		t.Errorf("MarkDetached of another pod's row = %v, want ErrConflict", err)
	}
	if r := row(t, s, "dummy1"); r.GetPhase() != attached || r.GetNetnsPath() != "/var/run/netns/p2" {
		t.Errorf("another pod's row after a late detach: phase %s, netns %q; want it as it was", r.GetPhase(), r.GetNetnsPath())
	}
	for _, pod := range []string{"uid-new", ""} {
		attach()
		if _, err := s.MarkDetached(&statev1.MarkDetachedRequest{Key: key, PodUid: pod}); err != nil {
			t.Fatalf("MarkDetached(pod %q): %v", pod, err)
		}
		if r := row(t, s, "dummy1"); r.GetPhase() != prepared || r.GetNetnsPath() != "" {
			t.Errorf("after MarkDetached(pod %q): phase %s, netns %q", pod, r.GetPhase(), r.GetNetnsPath())
		}
	}
}
