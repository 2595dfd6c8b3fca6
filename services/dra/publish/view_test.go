package publish

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// waitChanged waits for ch to close.
func waitChanged(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no change: %s", what)
	}
}

// TestPublisher_View: the view is empty and unsynced until the tables are
// synced; then it has the inventory, the allocations and each device's
// pool of the last publication, and its channel closes at every change.
func TestPublisher_View(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &fakeState{events: make(chan *statev1.WatchResponse, 16)}
	rec := &recorder{}
	p := NewPublisher(slog.New(slog.DiscardHandler), st, time.Millisecond, rec.publish)
	p.SetPools([]Spec{{Name: "red"}})
	v, changed := p.View()
	if v.Synced || len(v.Devices) != 0 {
		t.Fatalf("view before any event: %+v", v)
	}
	go p.Run(ctx)
	st.events <- &statev1.WatchResponse{Type: statev1.EventType_EVENT_TYPE_RESET}
	st.events <- upsert(&devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY})
	st.events <- &statev1.WatchResponse{Type: statev1.EventType_EVENT_TYPE_UPSERT, Object: &statev1.WatchResponse_Allocation{
		Allocation: &statev1.Allocation{Pool: "red", DeviceName: "dummy0", ClaimUid: "c1", Phase: statev1.Phase_PHASE_PREPARED}}}
	st.events <- &statev1.WatchResponse{Type: statev1.EventType_EVENT_TYPE_SYNCED, Revision: 1}
	for {
		waitChanged(t, "the publication", changed)
		if v, changed = p.View(); len(v.Pools) > 0 {
			break
		}
	}
	if !v.Synced || v.Devices["dummy0"] == nil || len(v.Allocations) != 1 {
		t.Errorf("synced view: %+v", v)
	}
	if diff := cmp.Diff(map[string]string{"dummy0": "red"}, v.Pools); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	// A device change closes the channel; the view taken before is
	// unchanged.
	st.events <- upsert(&devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, LinkState: devicev1.LinkState_LINK_STATE_DOWN})
	waitChanged(t, "the link state", changed)
	if v.Devices["dummy0"].GetLinkState() != devicev1.LinkState_LINK_STATE_UNSPECIFIED {
		t.Error("a view changed after it was taken")
	}
	for {
		v2, ch := p.View()
		if v2.Devices["dummy0"].GetLinkState() == devicev1.LinkState_LINK_STATE_DOWN {
			break
		}
		waitChanged(t, "the link state", ch)
	}
}
