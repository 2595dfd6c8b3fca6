package store

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func replace(t *testing.T, s *Store, names ...string) {
	t.Helper()
	var devs []*devicev1.Device
	for _, n := range names {
		devs = append(devs, &devicev1.Device{Name: n})
	}
	if _, err := s.ReplaceDevices(&statev1.ReplaceDevicesRequest{Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, Devices: devs}); err != nil {
		t.Fatal(err)
	}
}

// collect watches from (epoch, rev) until the first EVENT_TYPE_SYNCED and
// renders what it got.
func collect(t *testing.T, s *Store, epoch string, rev uint64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	errDone := fmt.Errorf("synced")
	err := s.Watch(ctx, epoch, rev, func(ev *statev1.WatchResponse) error {
		got = append(got, fmt.Sprintf("%d %s %s", ev.GetRevision(), ev.GetType(), ev.GetDevice().GetName()))
		if ev.GetType() == statev1.EventType_EVENT_TYPE_SYNCED {
			return errDone
		}
		return nil
	})
	if err != errDone {
		t.Fatalf("watch: %v", err)
	}
	return got
}

func TestWatch_Resume(t *testing.T) {
	s := openTest(t)
	replace(t, s, "dummy0", "dummy1") // revisions 1, 2
	epoch, _ := s.Revision()

	tests := []struct {
		name  string
		epoch string
		rev   uint64
		want  []string
	}{{
		name: "fresh start gets a snapshot",
		want: []string{"0 EVENT_TYPE_RESET ", "0 EVENT_TYPE_UPSERT dummy0", "0 EVENT_TYPE_UPSERT dummy1", "2 EVENT_TYPE_SYNCED "},
	}, {
		name:  "resume from a revision gets what followed it",
		epoch: epoch, rev: 1,
		want: []string{"2 EVENT_TYPE_UPSERT dummy1", "2 EVENT_TYPE_SYNCED "},
	}, {
		name:  "resume at the head gets nothing but synced",
		epoch: epoch, rev: 2,
		want: []string{"2 EVENT_TYPE_SYNCED "},
	}, {
		name:  "another epoch (a restart) gets a snapshot",
		epoch: "0123", rev: 1,
		want: []string{"0 EVENT_TYPE_RESET ", "0 EVENT_TYPE_UPSERT dummy0", "0 EVENT_TYPE_UPSERT dummy1", "2 EVENT_TYPE_SYNCED "},
	}, {
		name:  "a revision from the future gets a snapshot",
		epoch: epoch, rev: 9,
		want: []string{"0 EVENT_TYPE_RESET ", "0 EVENT_TYPE_UPSERT dummy0", "0 EVENT_TYPE_UPSERT dummy1", "2 EVENT_TYPE_SYNCED "},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, collect(t, s, tt.epoch, tt.rev)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	// A deletion is an event too.
	replace(t, s, "dummy1") // revision 3 deletes dummy0
	if diff := cmp.Diff([]string{"3 EVENT_TYPE_DELETE dummy0", "3 EVENT_TYPE_SYNCED "}, collect(t, s, epoch, 2)); diff != "" {
		t.Errorf("delete (-want +got):\n%s", diff)
	}
}

func TestWatch_FallenBehindGetsSnapshot(t *testing.T) {
	s := openTest(t)
	replace(t, s, "dummy0")
	epoch, _ := s.Revision()
	for i := range 2*changeLogSize + 1 {
		replace(t, s, "dummy0", fmt.Sprintf("x%d", i%2))
	}
	got := collect(t, s, epoch, 1)
	if got[0] != "0 EVENT_TYPE_RESET " || len(got) != 4 {
		t.Errorf("got %q, want a reset and a snapshot of 2 rows", got)
	}
}

func TestWatch_LiveChanges(t *testing.T) {
	s := openTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events := make(chan *statev1.WatchResponse, 16)
	go s.Watch(ctx, "", 0, func(ev *statev1.WatchResponse) error { events <- ev; return nil })
	next := func() string {
		select {
		case ev := <-events:
			return fmt.Sprintf("%d %s %s", ev.GetRevision(), ev.GetType(), ev.GetDevice().GetName())
		case <-ctx.Done():
			t.Fatal("no event")
		}
		return ""
	}
	var got []string
	got = append(got, next(), next())
	replace(t, s, "dummy0")
	got = append(got, next())
	want := []string{"0 EVENT_TYPE_RESET ", "0 EVENT_TYPE_SYNCED ", "1 EVENT_TYPE_UPSERT dummy0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	s.Close()
	if err := s.Watch(ctx, "", 0, func(*statev1.WatchResponse) error { return nil }); err != ErrClosed {
		t.Errorf("watch on a closed store: %v, want ErrClosed", err)
	}
}
