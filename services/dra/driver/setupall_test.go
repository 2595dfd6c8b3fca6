package driver

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// fourDevices is a claim of pod web with three VFs and a dummy.
var fourDevices = claimSpec{
	name: "c1", pods: []string{"web"},
	results: []resourceapi.DeviceRequestAllocationResult{
		result("a", "vf1"), result("b", "vf2"), result("c", "vf3"), result("d", "dummy0"),
	},
}

var fourDeviceNames = []string{"vf1", "vf2", "vf3", "dummy0"}

// inFlightWait is how long a Setup of allInFlight waits for the others.
const inFlightWait = 5 * time.Second

// allInFlight makes each of r's Setups wait until n of them are in flight
// at once; one that waits inFlightWait in vain fails, saying so. A driver
// that sets a claim's devices up one after the other fails with it.
func allInFlight(r *rig, n int) {
	setup := r.prov.SetupFunc
	var mu sync.Mutex
	inFlight, all := 0, make(chan struct{})
	r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
		mu.Lock()
		if inFlight++; inFlight == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(inFlightWait):
			mu.Lock()
			defer mu.Unlock()
			return nil, status.Errorf(codes.FailedPrecondition, "Setup of %s waited %v for %d Setups in flight at once; %d were",
				in.GetDeviceName(), inFlightWait, n, inFlight)
		}
		return setup(in)
	}
}

// TestPrepare_SetsUpEveryDeviceAtOnce: a claim's Setups are all in flight
// at once, and the claim is prepared with every device set up once.
func TestPrepare_SetsUpEveryDeviceAtOnce(t *testing.T) {
	r := newRig(t)
	h := r.hold()
	allInFlight(r, len(fourDeviceNames))
	got, err := r.prepare(t, fourDevices.build())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(fourDeviceNames) {
		t.Errorf("devices %v, want the claim's four", got)
	}
	want := []string{
		"pool-a/dummy0 PHASE_PREPARED uid-c1 pod=uid-web if= pd",
		"pool-a/vf1 PHASE_PREPARED uid-c1 pod=uid-web if= pd",
		"pool-a/vf2 PHASE_PREPARED uid-c1 pod=uid-web if= pd",
		"pool-a/vf3 PHASE_PREPARED uid-c1 pod=uid-web if= pd",
	}
	if diff := cmp.Diff(want, rowSummary(r.mem.snapshot())); diff != "" {
		t.Errorf("state rows (-want +got):\n%s", diff)
	}
	h.check(t, fourDeviceNames...)
}

// outcome is how a device's Setup ends in the fake provisioner.
type outcome int

const (
	setUpOK     outcome = iota
	refused             // Setup fails; nothing was changed
	recordFails         // Setup succeeds; recording its prepared device fails
	replyLost           // Setup did its work; its reply is lost (Unavailable)
)

func (o outcome) String() string {
	return [...]string{"ok", "refused", "record fails", "reply lost"}[o]
}

// endSetups makes each device's Setup end as outcomes says (setUpOK when
// it does not name the device). Install it after hold.
func endSetups(r *rig, outcomes map[string]outcome) {
	setup, record := r.prov.SetupFunc, r.state.RecordPreparedFunc
	r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
		name := in.GetDeviceName()
		if outcomes[name] == refused {
			return nil, status.Errorf(codes.Unknown, "setting up %s: PF ens1f0 refused", name)
		}
		resp, err := setup(in)
		if err == nil && outcomes[name] == replyLost {
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return resp, err
	}
	r.state.RecordPreparedFunc = func(in *statev1.RecordPreparedRequest) (*statev1.RecordPreparedResponse, error) {
		if outcomes[in.GetAllocations()[0].GetKey().GetDeviceName()] == recordFails {
			return nil, status.Error(codes.Unknown, "disk full")
		}
		return record(in)
	}
}

// TestPrepare_SetupsFailingAtOnce: of a claim's Setups in flight at once,
// vf2's fails, vf3's prepared device cannot be recorded and dummy0's reply
// is lost: the prepare fails naming the three, vf1, vf3 and dummy0 (from a
// guess) are freed once each, vf2 not at all, and every intent is aborted.
func TestPrepare_SetupsFailingAtOnce(t *testing.T) {
	r := newRig(t)
	h := r.hold()
	endSetups(r, map[string]outcome{"vf2": refused, "vf3": recordFails, "dummy0": replyLost})
	allInFlight(r, len(fourDeviceNames))
	_, err := r.prepare(t, fourDevices.build())
	if err == nil {
		t.Fatal("prepare succeeded, want it to fail")
	}
	for _, want := range []string{
		`device vf2 (request "b"): setup: setting up vf2: PF ens1f0 refused`,
		`device vf3 (request "c"): recording the prepared device: disk full`,
		`device dummy0 (request "d"): setup: connection reset`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	wantCalls := calls([]string{
		"state.ListAllocations claim=uid-c1", "state.ListAllocations pod=uid-web", "state.ListDevices",
		"state.BeginPrepare pool-a/vf1 pool-a/vf2 pool-a/vf3 pool-a/dummy0",
	}, setUps(
		"prov.Setup vf1", "state.RecordPrepared pool-a/vf1", "prov.Setup vf2",
		"prov.Setup vf3", "state.RecordPrepared pool-a/vf3", "prov.Setup dummy0",
	), []string{
		"prov.Free dummy0", "prov.Free vf3", "prov.Free vf1",
		"state.AbortPrepare pool-a/vf1 pool-a/vf2 pool-a/vf3 pool-a/dummy0",
		"claims.Event Warning PrepareFailed",
	})
	if diff := cmp.Diff(wantCalls, setUpsSorted(r.rec.get())); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if rows := r.mem.snapshot(); len(rows) != 0 {
		t.Errorf("state rows %v, want none", rowSummary(rows))
	}
	h.check(t)
}

// TestPrepare_AnySubsetOfSetupsFails: for every way the four Setups of a
// claim, in flight at once, can end (a VF's refused, its record failing;
// the dummy's also with its reply lost), a prepare with any failure fails
// naming each failed device, and leaves nothing set up, nothing freed
// twice and no row; one without prepares all four. It stops at the first
// way that fails (each waits inFlightWait when Setups run one after the
// other).
func TestPrepare_AnySubsetOfSetupsFails(t *testing.T) {
	vfEnds := []outcome{setUpOK, refused, recordFails}
	dummyEnds := []outcome{setUpOK, refused, recordFails, replyLost}
	ways := []map[string]outcome{{}}
	for _, name := range fourDeviceNames {
		ends := vfEnds
		if name == "dummy0" {
			ends = dummyEnds
		}
		var next []map[string]outcome
		for _, w := range ways {
			for _, o := range ends {
				next = append(next, with1(w, name, o))
			}
		}
		ways = next
	}
	for _, outcomes := range ways {
		name := fmt.Sprintf("%v,%v,%v,%v", outcomes["vf1"], outcomes["vf2"], outcomes["vf3"], outcomes["dummy0"])
		ok := t.Run(name, func(t *testing.T) {
			r := newRig(t)
			h := r.hold()
			endSetups(r, outcomes)
			allInFlight(r, len(fourDeviceNames))
			_, err := r.prepare(t, fourDevices.build())
			checkAllOrNothing(t, r, h, outcomes, err)
		})
		if !ok {
			break
		}
	}
}

// with1 is a copy of m with m[k] = v.
func with1(m map[string]outcome, k string, v outcome) map[string]outcome {
	out := maps.Clone(m)
	out[k] = v
	return out
}

// checkAllOrNothing checks what a prepare of fourDevices left, its
// Setups ending as outcomes says.
func checkAllOrNothing(t *testing.T, r *rig, h *holder, outcomes map[string]outcome, err error) {
	t.Helper()
	var failed []string
	for _, name := range fourDeviceNames {
		if outcomes[name] != setUpOK {
			failed = append(failed, name)
		}
	}
	if len(failed) == 0 {
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		h.check(t, fourDeviceNames...)
		return
	}
	if err == nil {
		t.Fatalf("prepare succeeded, want it to fail naming %v", failed)
	}
	for _, name := range fourDeviceNames {
		if named := strings.Contains(err.Error(), "device "+name+" "); named != (outcomes[name] != setUpOK) {
			t.Errorf("error %q names %s: %v, want %v", err, name, named, !named)
		}
	}
	if rows := r.mem.snapshot(); len(rows) != 0 {
		t.Errorf("state rows %v, want none", rowSummary(rows))
	}
	h.check(t)
}
