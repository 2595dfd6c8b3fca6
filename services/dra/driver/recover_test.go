package driver

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// preparedClaim prepares spec on a rig of its own and returns the status
// entries the driver wrote and the allocations it made.
func preparedClaim(t *testing.T, spec claimSpec) ([]resourceapi.AllocatedDeviceStatus, []*statev1.Allocation) {
	t.Helper()
	r := newRig(t)
	if _, err := r.prepare(t, spec.build()); err != nil {
		t.Fatal(err)
	}
	return r.claims.getWritten(string(spec.build().UID)), r.mem.snapshot()
}

func TestRecover(t *testing.T) {
	f := newRecoverFixture(t)
	for _, cases := range [][]recoverCase{f.statusCases(), f.trustedCases(), f.uncommittedCases(), f.dummyIntentCases()} {
		for _, tt := range cases {
			t.Run(tt.name, tt.run)
		}
	}
}

// recoverCase is one case of TestRecover: Recover of claims on a rig with
// rows (and change's faults), and what it must return, call and leave; a
// second Recover must change nothing.
type recoverCase struct {
	name      string
	rows      []*statev1.Allocation
	claims    []claimSpec
	change    func(*rig)
	wantErr   string
	wantCalls []string
	// wantRows are the rows after, in full.
	wantRows []*statev1.Allocation
	// check checks more after the first Recover.
	check func(*testing.T, *rig)
}

// recoverFixture is what TestRecover's cases are made of: the status
// entries and rows of a claim prepared on a rig of its own, that claim
// with its status recorded (with another driver's entry and a device not
// ready) or not, another claim's row, and a VF's recorded prepared device.
type recoverFixture struct {
	entries     []resourceapi.AllocatedDeviceStatus
	rows        []*statev1.Allocation
	recorded    claimSpec
	unrecorded  claimSpec
	other       *statev1.Allocation
	recordedVF1 *devicev1.PreparedDevice
}

func newRecoverFixture(t *testing.T) recoverFixture {
	entries, rows := preparedClaim(t, twoVFs)
	otherDriver := resourceapi.AllocatedDeviceStatus{Driver: "gpu.example.com", Pool: "gpus", Device: "gpu-0",
		Data: &runtime.RawExtension{Raw: []byte(`{"gpu":true}`)}}
	notReady := resourceapi.AllocatedDeviceStatus{Driver: testDriver, Pool: testSlicePool, Device: "vf3",
		Conditions: []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: "PrepareRolledBack"}}}
	recorded := with(twoVFs, func(c *claimSpec) {
		c.status = append([]resourceapi.AllocatedDeviceStatus{otherDriver}, entries...)
		c.results = append(c.results, result("spare", "vf3"))
		c.status = append(c.status, notReady)
	})
	recordedVF1 := preparedOf(deviceByName("vf1"))
	recordedVF1.OriginalVf = &devicev1.VfSnapshot{MacAddress: "02:00:00:00:00:01", Vlan: 7, SpoofChk: true}
	return recoverFixture{entries: entries, rows: rows, recorded: recorded, unrecorded: twoVFs,
		other: row("c0", "db", "vf3", prepared, nil), recordedVF1: recordedVF1}
}

// intents are the prepared claim's rows of the devices names as intents:
// preparing, with no prepared device.
func (f recoverFixture) intents(names ...string) []*statev1.Allocation {
	var out []*statev1.Allocation
	for _, r := range f.rows {
		for _, n := range names {
			if r.GetDeviceName() == n {
				i := proto.CloneOf(r)
				i.Phase, i.PreparedDevice = preparing, nil
				out = append(out, i)
			}
		}
	}
	return out
}

// statusCases are the cases of an empty state: the allocations rebuilt
// from the claims' status.
func (f recoverFixture) statusCases() []recoverCase {
	return []recoverCase{
		{
			name:   "empty state: allocations rebuilt from the claim status",
			claims: []claimSpec{f.recorded},
			wantCalls: []string{
				"state.ListAllocations ",
				"prov.Restore", "prov.Restore",
				"state.RestoreAllocations pool-a/vf1 pool-a/vf2",
			},
			wantRows: f.rows,
		},
		{
			name:      "empty state and no status: nothing to restore",
			claims:    []claimSpec{f.unrecorded},
			wantCalls: []string{"state.ListAllocations "},
		},
		{
			name:   "empty state, restore refused: an event names the device, nothing is restored",
			claims: []claimSpec{f.recorded},
			change: func(r *rig) {
				r.prov.RestoreFunc = func(*provisionerv1.RestoreRequest) (*provisionerv1.RestoreResponse, error) {
					return nil, status.Error(codes.InvalidArgument, "data.originalLink: required for a device with a kernel interface")
				}
			},
			wantCalls: []string{
				"state.ListAllocations ",
				"prov.Restore", "claims.Event Warning RecoveryRefused",
				"prov.Restore", "claims.Event Warning RecoveryRefused",
			},
			check: func(t *testing.T, r *rig) {
				want := "c1 Warning RecoveryRefused: device vf1 not restored after a restart, nothing done to its devices: " +
					"claim status data is not a netdra prepared device: the provisioner refused the prepared device: data.originalLink: required"
				if ev := r.claims.getEvents(); len(ev) != 2 || !strings.HasPrefix(ev[0], want) {
					t.Errorf("events %q, want the first to start %q", ev, want)
				}
			},
		},
		{
			name:   "empty state, provisioner unavailable: the error names the claim and device, for a retry",
			claims: []claimSpec{f.recorded},
			change: func(r *rig) {
				r.prov.RestoreFunc = func(*provisionerv1.RestoreRequest) (*provisionerv1.RestoreResponse, error) {
					return nil, status.Error(codes.Unavailable, "the DEVICE_MANAGER_SRIOV manager has not reported its devices yet")
				}
			},
			wantErr: "claim default/c1: device vf1: restoring the prepared device: the DEVICE_MANAGER_SRIOV manager has not reported",
			wantCalls: []string{
				"state.ListAllocations ",
				"prov.Restore", "prov.Restore",
			},
		},
	}
}

// trustedCases are the cases of a state with a claim's allocations or
// intents: allocations trusted over its status, intents completed from
// it.
func (f recoverFixture) trustedCases() []recoverCase {
	return []recoverCase{
		{
			name:      "allocations trusted: a claim's status is not restored over them",
			rows:      []*statev1.Allocation{f.other},
			claims:    []claimSpec{f.recorded},
			wantCalls: []string{"state.ListAllocations "},
			wantRows:  []*statev1.Allocation{f.other},
		},
		{
			name:   "an intent whose status was written is completed from it",
			rows:   append([]*statev1.Allocation{f.other}, f.intents("vf1", "vf2")...),
			claims: []claimSpec{f.recorded},
			wantCalls: []string{
				"state.ListAllocations ",
				"prov.Restore", "state.RestoreAllocations pool-a/vf1",
				"prov.Restore", "state.RestoreAllocations pool-a/vf2",
			},
			wantRows: append(f.rows, f.other),
		},
	}
}

// uncommittedCases are the cases of a claim's SR-IOV intents left by a
// prepare that died before its status: rolled back.
func (f recoverFixture) uncommittedCases() []recoverCase {
	return []recoverCase{
		{
			name:   "an uncommitted intent is rolled back",
			rows:   append([]*statev1.Allocation{f.other}, f.intents("vf1")...),
			claims: []claimSpec{f.unrecorded},
			wantCalls: []string{
				"state.ListAllocations ",
				"state.ListDevices", "state.AbortPrepare pool-a/vf1",
			},
			wantRows: []*statev1.Allocation{f.other},
		},
		{
			// Setup returned and its prepared device was recorded, then the
			// process died before the claim status: the VF's settings are
			// restored from the recorded original state, which before
			// RecordPrepared was lost with the process.
			name: "an uncommitted SR-IOV intent with its recorded prepared device is freed with it",
			rows: []*statev1.Allocation{f.other, func() *statev1.Allocation {
				r := row("c1", "web", "vf1", preparing, nil)
				r.PreparedDevice = f.recordedVF1
				return r
			}()},
			claims: []claimSpec{f.unrecorded},
			change: func(r *rig) {
				r.prov.FreeFunc = func(in *provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
					r.freed = append(r.freed, in.GetPreparedDevice())
					return &provisionerv1.FreeResponse{}, nil
				}
			},
			check: func(t *testing.T, r *rig) {
				if diff := cmp.Diff([]*devicev1.PreparedDevice{f.recordedVF1}, r.freed, protocmp.Transform()); diff != "" {
					t.Errorf("freed (-want +got):\n%s", diff)
				}
			},
			wantCalls: []string{
				"state.ListAllocations ",
				"prov.Free vf1", "state.AbortPrepare pool-a/vf1",
			},
			wantRows: []*statev1.Allocation{f.other},
		},
	}
}

// dummyIntentCases are the cases of a dummy link's intent left by a
// prepare that died, and of an intent whose status data is unusable.
func (f recoverFixture) dummyIntentCases() []recoverCase {
	return []recoverCase{
		{
			name: "an uncommitted dummy intent: its link is freed",
			rows: []*statev1.Allocation{f.other, row("c1", "web", "dummy0", preparing, nil)},
			wantCalls: []string{
				"state.ListAllocations ",
				"state.ListDevices", "prov.Free dummy0", "state.AbortPrepare pool-a/dummy0",
			},
			wantRows: []*statev1.Allocation{f.other},
		},
		{
			name: "an uncommitted dummy intent whose free fails is left to the retry loop",
			rows: []*statev1.Allocation{row("c1", "web", "dummy0", preparing, nil)},
			change: func(r *rig) {
				r.prov.FreeFunc = failingFree(1)
			},
			wantCalls: []string{
				"state.ListAllocations ",
				"state.ListDevices", "prov.Free dummy0", "state.MarkFreeFailed pool-a/dummy0",
			},
			wantRows: func() []*statev1.Allocation {
				r := row("c1", "web", "dummy0", freeingFailed, nil)
				r.PreparedDevice, r.LastError, r.Attempts = nil, "freeing device dummy0: PF ens1f0 is busy", 1
				return []*statev1.Allocation{r}
			}(),
		},
		{
			name: "an intent with unusable status data is rolled back",
			rows: append([]*statev1.Allocation{f.other}, f.intents("vf1")...),
			claims: []claimSpec{with(twoVFs, func(c *claimSpec) {
				bad := f.entries[0]
				bad.Data = &runtime.RawExtension{Raw: []byte(`{"device":"vf1"}`)}
				c.status = []resourceapi.AllocatedDeviceStatus{bad}
			})},
			wantCalls: []string{
				"state.ListAllocations ",
				"state.ListDevices", "state.AbortPrepare pool-a/vf1",
			},
			wantRows: []*statev1.Allocation{f.other},
		},
	}
}

// run recovers the case's claims, checks the error, the calls and the
// rows, then that a second Recover changes nothing.
func (tt recoverCase) run(t *testing.T) {
	r := newRig(t, tt.rows...)
	if tt.change != nil {
		tt.change(r)
	}
	var claims []*resourceapi.ResourceClaim
	for _, c := range tt.claims {
		claims = append(claims, c.build())
	}
	err := r.d.Recover(context.Background(), claims)
	switch {
	case tt.wantErr == "" && err != nil:
		t.Fatalf("Recover: %v", err)
	case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
		t.Fatalf("Recover error %v, want %q", err, tt.wantErr)
	}
	// Recover ends with one listing of the allocations, for the
	// claims' status and CDI specs.
	if diff := cmp.Diff(append(slices.Clone(tt.wantCalls), "state.ListAllocations "), r.rec.get()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.wantRows, r.mem.snapshot(), protocmp.Transform()); diff != "" {
		t.Errorf("state rows (-want +got):\n%s", diff)
	}
	if tt.check != nil {
		tt.check(t, r)
	}
	// Recovering again changes nothing.
	if tt.wantErr != "" {
		return
	}
	before := r.mem.snapshot()
	r.rec.calls = nil
	if err := r.d.Recover(context.Background(), claims); err != nil {
		t.Fatalf("second Recover: %v", err)
	}
	if diff := cmp.Diff(before, r.mem.snapshot(), protocmp.Transform()); diff != "" {
		t.Errorf("second Recover changed rows (-before +after):\n%s", diff)
	}
	for _, c := range r.rec.get("state.List") {
		if len(tt.rows) > 0 || !strings.HasPrefix(c, "prov.Restore") && !strings.HasPrefix(c, "state.RestoreAllocations") && !strings.HasPrefix(c, "claims.Event") {
			t.Errorf("second Recover called %s", c)
		}
	}
}

// TestRecover_ThenPrepareIsIdempotent: after a reboot rebuilt the state,
// the kubelet's prepare finds the claim prepared and sets nothing up.
func TestRecover_ThenPrepareIsIdempotent(t *testing.T) {
	entries, _ := preparedClaim(t, twoVFs)
	spec := twoVFs
	spec.status = entries
	r := newRig(t)
	if err := r.d.Recover(context.Background(), []*resourceapi.ResourceClaim{spec.build()}); err != nil {
		t.Fatal(err)
	}
	r.rec.calls = nil
	got, err := r.prepare(t, spec.build())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(twoVFsResult, got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(readCalls, setUpsSorted(r.rec.get())); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestRecover_WritesMissingStatus: a claim committed before a crash that
// came before its status write gets the status a prepare writes, from its
// allocations; a claim whose status has its entries is not written.
func TestRecover_WritesMissingStatus(t *testing.T) {
	entries, rows := preparedClaim(t, twoVFs)
	r := newRig(t, rows...)
	if err := r.d.Recover(context.Background(), []*resourceapi.ResourceClaim{twoVFs.build()}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(entries, r.claims.getWritten("uid-c1")); diff != "" {
		t.Errorf("status written at recovery (-prepare's +recovery's):\n%s", diff)
	}
	if diff := cmp.Diff(rows, r.mem.snapshot(), protocmp.Transform()); diff != "" {
		t.Errorf("state rows changed (-before +after):\n%s", diff)
	}
	r.rec.calls = nil
	written := twoVFs
	written.status = entries
	if err := r.d.Recover(context.Background(), []*resourceapi.ResourceClaim{written.build()}); err != nil {
		t.Fatal(err)
	}
	if got := r.rec.get("state.List"); len(got) != 0 {
		t.Errorf("Recover of a claim with its status called %q, want nothing but listings", got)
	}
}
