package driver

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/statusdata"
)

const (
	preparing     = statev1.Phase_PHASE_PREPARING
	prepared      = statev1.Phase_PHASE_PREPARED
	attached      = statev1.Phase_PHASE_ATTACHED
	freeingFailed = statev1.Phase_PHASE_FREEING_FAILED
)

// twoVFs is a claim of pod web with two VFs of this driver, each with its
// interface name, and a device of another driver with that driver's
// config (which would be an unknown field to netdra).
var twoVFs = claimSpec{
	name: "c1", pods: []string{"web"},
	results: []resourceapi.DeviceRequestAllocationResult{
		result("net", "vf1"), otherResult("gpu", "gpu-0"), result("storage", "vf2"),
	},
	configs: []resourceapi.DeviceAllocationConfiguration{
		claimConfig(`{"podIfName":"net1","vlan":100,"addresses":["10.0.0.2/24"]}`, "net"),
		opaque(resourceapi.AllocationConfigSourceClaim, "gpu.example.com", `{"cores":4}`),
		claimConfig(`{"podIfName":"net2"}`, "storage"),
	},
}

var twoVFsResult = []deviceResult{
	{Requests: "[net]", Pool: testSlicePool, Device: "vf1"},
	{Requests: "[storage]", Pool: testSlicePool, Device: "vf2"},
}

// with returns a copy of spec changed by f.
func with(spec claimSpec, f func(*claimSpec)) claimSpec {
	spec.results = append([]resourceapi.DeviceRequestAllocationResult(nil), spec.results...)
	spec.configs = append([]resourceapi.DeviceAllocationConfiguration(nil), spec.configs...)
	f(&spec)
	return spec
}

// readCalls is the calls of a prepare's reads, which run at once: sorted, as
// setUpsSorted puts them.
var readCalls = []string{
	"state.ListAllocations claim=uid-c1",
	"state.ListAllocations pod=uid-web",
	"state.ListDevices",
}

var freshCalls = calls(readCalls, []string{"state.BeginPrepare pool-a/vf1 pool-a/vf2"})

// setUps is the calls of a claim's Setups, which run at once: sorted, as
// setUpsSorted puts them.
func setUps(calls ...string) []string { return slices.Sorted(slices.Values(calls)) }

// setUpsSorted sorts each run of calls that a claim's Setups make
// (prov.Setup, state.RecordPrepared) and each run of reads of the state
// (a prepare's reads): they run at once, and a test states which calls
// they make, not in which order. A call of another kind between two runs
// (a Free) still splits them.
func setUpsSorted(calls []string) []string {
	out := slices.Clone(calls)
	kind := func(c string) int {
		switch {
		case strings.HasPrefix(c, "prov.Setup "), strings.HasPrefix(c, "state.RecordPrepared "):
			return 1
		case strings.HasPrefix(c, "state.ListAllocations "), strings.HasPrefix(c, "state.ListDevices"):
			return 2
		}
		return 0
	}
	for i := 0; i < len(out); i++ {
		k, j := kind(out[i]), i
		for j < len(out) && k != 0 && kind(out[j]) == k {
			j++
		}
		slices.Sort(out[i:j])
		i = max(i, j-1)
	}
	return out
}

func calls(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// prepareCase is one case of TestPrepare: a prepare of claim on a rig
// with rows in the state service (and change's faults), and what it must
// return, call and leave.
type prepareCase struct {
	name  string
	rows  []*statev1.Allocation
	claim claimSpec
	// change overrides fakes.
	change      func(*rig)
	wantDevices []deviceResult
	wantErr     error
	// wantMsg is in the error and in the event.
	wantMsg   string
	wantCalls []string
	wantRows  []string
	// check checks more after the prepare.
	check func(*testing.T, *rig)
}

// prepareFailedEvent is the calls of a prepare refused before it called
// anything: the claim's PrepareFailed event.
var prepareFailedEvent = []string{"claims.Event Warning PrepareFailed"}

func TestPrepare(t *testing.T) {
	for _, tt := range prepareCases {
		t.Run(tt.name, tt.run)
	}
}

// prepareCases are TestPrepare's cases.
var prepareCases = []prepareCase{
	{
		name:        "prepares: intents, the setups at once, commit, then the status",
		claim:       twoVFs,
		wantDevices: twoVFsResult,
		wantCalls: calls(freshCalls, setUps(
			"prov.Setup vf1", "state.RecordPrepared pool-a/vf1", "prov.Setup vf2", "state.RecordPrepared pool-a/vf2",
		), []string{
			"state.CommitPrepare pool-a/vf1 pool-a/vf2",
			"state.ListAllocations claim=uid-c1", "claims.UpdateDeviceStatus node-a/pool-a/vf1 node-a/pool-a/vf2",
		}),
		wantRows: []string{
			"pool-a/vf1 PHASE_PREPARED uid-c1 pod=uid-web if=net1 pd",
			"pool-a/vf2 PHASE_PREPARED uid-c1 pod=uid-web if=net2 pd",
		},
	},
	{
		name: "only other drivers' devices: nothing to do",
		claim: claimSpec{name: "c1", pods: []string{"web"},
			results: []resourceapi.DeviceRequestAllocationResult{otherResult("gpu", "gpu-0")}},
		wantCalls: []string{},
		wantRows:  []string{},
	},
	{
		name:      "reserved for no pod",
		claim:     with(twoVFs, func(c *claimSpec) { c.pods = nil }),
		wantErr:   ErrNotOnePod,
		wantMsg:   "reserved for none",
		wantCalls: prepareFailedEvent,
		wantRows:  []string{},
	},
	{
		name:      "reserved for two pods",
		claim:     with(twoVFs, func(c *claimSpec) { c.pods = []string{"web", "db"} }),
		wantErr:   ErrNotOnePod,
		wantMsg:   "reserved for 2: pods/web, pods/db",
		wantCalls: prepareFailedEvent,
		wantRows:  []string{},
	},
	{
		name:  "host-network pod",
		claim: twoVFs,
		change: func(r *rig) {
			r.pods["web"] = podOf("web")
			r.pods["web"].Spec.HostNetwork = true
		},
		wantErr:   ErrHostNetwork,
		wantMsg:   "pod default/web: pod uses the host network",
		wantCalls: calls(readCalls, prepareFailedEvent),
		wantRows:  []string{},
	},
	{
		name:  "pod replaced since the claim was reserved",
		claim: twoVFs,
		change: func(r *rig) {
			r.pods["web"] = podOf("web")
			r.pods["web"].UID = "uid-web-2"
		},
		wantMsg:   "pod default/web is uid-web-2, not the uid-web the claim is reserved for",
		wantCalls: calls(readCalls, prepareFailedEvent),
		wantRows:  []string{},
	},
	{
		name: "config out of range: nothing touched",
		claim: with(twoVFs, func(c *claimSpec) {
			c.configs[2] = claimConfig(`{"podIfName":"net2","vlan":5000}`, "storage")
		}),
		wantMsg:   `request "storage": config.vlan: 5000 is out of range 0..4094`,
		wantCalls: prepareFailedEvent,
		wantRows:  []string{},
	},
	{
		name: "unknown config field",
		claim: with(twoVFs, func(c *claimSpec) {
			c.configs = append(c.configs, claimConfig(`{"vlanId":5}`))
		}),
		wantMsg:   `request "net": config.vlanId: unknown field`,
		wantCalls: prepareFailedEvent,
		wantRows:  []string{},
	},
	{
		name: "admin access refused",
		claim: with(twoVFs, func(c *claimSpec) {
			yes := true
			c.results[0].AdminAccess = &yes
		}),
		wantErr:   ErrAdminAccess,
		wantCalls: prepareFailedEvent,
		wantRows:  []string{},
	},
	{
		name: "same interface name twice in the claim",
		claim: with(twoVFs, func(c *claimSpec) {
			c.configs[2] = claimConfig(`{"podIfName":"net1"}`, "storage")
		}),
		wantErr:   ErrIfNameInUse,
		wantMsg:   `"net1" of request "storage" is also the name of request "net" of this claim`,
		wantCalls: calls(readCalls, prepareFailedEvent),
		wantRows:  []string{},
	},
	{
		name:      "interface name taken by another claim of the pod",
		rows:      []*statev1.Allocation{row("c0", "web", "vf3", prepared, &devicev1.DeviceConfig{PodIfName: "net2"})},
		claim:     twoVFs,
		wantErr:   ErrIfNameInUse,
		wantMsg:   `"net2" of request "storage" is also the name of device vf3 of claim default/c0`,
		wantCalls: calls(readCalls, prepareFailedEvent),
		wantRows:  []string{"pool-a/vf3 PHASE_PREPARED uid-c0 pod=uid-web if=net2 pd"},
	},
	{
		name: "kernel name of another claim's device is taken too",
		rows: []*statev1.Allocation{row("c0", "web", "vf3", prepared, nil)},
		claim: with(twoVFs, func(c *claimSpec) {
			c.configs[2] = claimConfig(`{"podIfName":"ens1f0v3"}`, "storage")
		}),
		wantErr:   ErrIfNameInUse,
		wantCalls: calls(readCalls, prepareFailedEvent),
		wantRows:  []string{"pool-a/vf3 PHASE_PREPARED uid-c0 pod=uid-web if= pd"},
	},
	{
		name:      "device held by another claim",
		rows:      []*statev1.Allocation{row("c9", "db", "vf2", prepared, nil)},
		claim:     twoVFs,
		wantMsg:   "reserving devices: device vf2 is allocated to claim uid-c9 in pool pool-a: conflict",
		wantCalls: calls(freshCalls, prepareFailedEvent),
		wantRows:  []string{"pool-a/vf2 PHASE_PREPARED uid-c9 pod=uid-db if= pd"},
	},
	{
		name:      "device not in the inventory",
		claim:     with(twoVFs, func(c *claimSpec) { c.results[2].Device = "vf9" }),
		wantErr:   ErrUnknownDevice,
		wantMsg:   `device vf9 (request "storage")`,
		wantCalls: calls(readCalls, prepareFailedEvent),
		wantRows:  []string{},
	},
	{
		name:  "setup of the second device fails: the first is freed",
		claim: twoVFs,
		change: func(r *rig) {
			setup := r.prov.SetupFunc
			r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
				if in.GetDeviceName() == "vf2" {
					return nil, status.Error(codes.Unknown, "setting up vf2: PF ens1f0 refused VLAN 100")
				}
				return setup(in)
			}
		},
		wantMsg: `device vf2 (request "storage"): setup: setting up vf2: PF ens1f0 refused VLAN 100`,
		wantCalls: calls(freshCalls, setUps(
			"prov.Setup vf1", "state.RecordPrepared pool-a/vf1", "prov.Setup vf2",
		), []string{
			"prov.Free vf1",
			"state.AbortPrepare pool-a/vf1 pool-a/vf2",
		}, prepareFailedEvent),
		wantRows: []string{},
	},
	{
		name: "setup reply lost for a dummy: its link is freed too",
		claim: claimSpec{name: "c1", pods: []string{"web"},
			results: []resourceapi.DeviceRequestAllocationResult{result("net", "vf1"), result("storage", "dummy0")}},
		change: func(r *rig) {
			setup := r.prov.SetupFunc
			r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
				if in.GetDeviceName() == "dummy0" {
					return nil, status.Error(codes.Unavailable, "connection reset")
				}
				return setup(in)
			}
			r.prov.FreeFunc = func(in *provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
				if in.GetPreparedDevice().GetDevice().GetName() == "dummy0" {
					r.freed = append(r.freed, in.GetPreparedDevice())
				}
				return &provisionerv1.FreeResponse{}, nil
			}
		},
		check: func(t *testing.T, r *rig) {
			want := []*devicev1.PreparedDevice{{
				Device:       deviceByName("dummy0"),
				OriginalLink: &devicev1.LinkSnapshot{Name: "dummy0"}, LinkCreated: true,
			}}
			if diff := cmp.Diff(want, r.freed, protocmp.Transform()); diff != "" {
				t.Errorf("dummy0 freed as (-want +got):\n%s", diff)
			}
		},
		wantMsg: "connection reset",
		wantCalls: calls(readCalls, []string{
			"state.BeginPrepare pool-a/vf1 pool-a/dummy0",
		}, setUps(
			"prov.Setup vf1", "state.RecordPrepared pool-a/vf1", "prov.Setup dummy0",
		), []string{
			"prov.Free dummy0", "prov.Free vf1",
			"state.AbortPrepare pool-a/vf1 pool-a/dummy0",
		}, prepareFailedEvent),
		wantRows: []string{},
	},
	{
		name:  "recording a prepared device fails: it is freed at once",
		claim: twoVFs,
		change: func(r *rig) {
			record := r.state.RecordPreparedFunc
			r.state.RecordPreparedFunc = func(in *statev1.RecordPreparedRequest) (*statev1.RecordPreparedResponse, error) {
				if in.GetAllocations()[0].GetKey().GetDeviceName() == "vf2" {
					return nil, status.Error(codes.Unavailable, "state service restarting")
				}
				return record(in)
			}
		},
		wantMsg: `device vf2 (request "storage"): recording the prepared device: state service restarting`,
		wantCalls: calls(freshCalls, setUps(
			"prov.Setup vf1", "state.RecordPrepared pool-a/vf1", "prov.Setup vf2", "state.RecordPrepared pool-a/vf2",
		), []string{
			"prov.Free vf2", "prov.Free vf1",
			"state.AbortPrepare pool-a/vf1 pool-a/vf2",
		}, prepareFailedEvent),
		wantRows: []string{},
	},
	{
		name:  "status write fails after the commit: the prepare stands, the write tried again, then an event",
		claim: twoVFs,
		change: func(r *rig) {
			r.claims.UpdateDeviceStatusFunc = func(*resourceapi.ResourceClaim, []resourceapi.AllocatedDeviceStatus) error {
				return errors.New("resourceclaims.resource.k8s.io \"c1\" is forbidden")
			}
		},
		wantDevices: twoVFsResult,
		wantCalls: calls(freshCalls, setUps(
			"prov.Setup vf1", "state.RecordPrepared pool-a/vf1", "prov.Setup vf2", "state.RecordPrepared pool-a/vf2",
		), []string{"state.CommitPrepare pool-a/vf1 pool-a/vf2"},
			slices.Repeat([]string{"state.ListAllocations claim=uid-c1", "claims.UpdateDeviceStatus node-a/pool-a/vf1 node-a/pool-a/vf2"}, statusAttempts),
			[]string{"claims.Event Warning StatusNotWritten"}),
		wantRows: []string{
			"pool-a/vf1 PHASE_PREPARED uid-c1 pod=uid-web if=net1 pd",
			"pool-a/vf2 PHASE_PREPARED uid-c1 pod=uid-web if=net2 pd",
		},
		check: func(t *testing.T, r *rig) {
			if ev := r.claims.getEvents(); len(ev) != 1 || !strings.Contains(ev[0], "StatusNotWritten") || !strings.Contains(ev[0], "is forbidden") {
				t.Errorf("events %q, want one StatusNotWritten event with the last error", ev)
			}
		},
	},
	{
		name:  "commit fails: all freed, no status written",
		claim: twoVFs,
		change: func(r *rig) {
			r.state.CommitPrepareFunc = func(*statev1.CommitPrepareRequest) (*statev1.CommitPrepareResponse, error) {
				return nil, status.Error(codes.Unavailable, "state service restarting")
			}
		},
		wantMsg: "committing the allocations: state service restarting",
		check: func(t *testing.T, r *rig) {
			if st := r.claims.getWritten("uid-c1"); len(st) != 0 {
				t.Errorf("status entries %+v after a failed prepare, want none", st)
			}
		},
		wantCalls: calls(freshCalls, setUps(
			"prov.Setup vf1", "state.RecordPrepared pool-a/vf1", "prov.Setup vf2", "state.RecordPrepared pool-a/vf2",
		), []string{
			"state.CommitPrepare pool-a/vf1 pool-a/vf2",
			"prov.Free vf2", "prov.Free vf1",
			"state.AbortPrepare pool-a/vf1 pool-a/vf2",
		}, prepareFailedEvent),
		wantRows: []string{},
	},
	{
		name:  "free fails in the rollback: kept for the retry loop",
		claim: twoVFs,
		change: func(r *rig) {
			r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
				if in.GetDeviceName() == "vf2" {
					return nil, status.Error(codes.Unknown, "no such VF")
				}
				return &provisionerv1.SetupResponse{PreparedDevice: preparedOf(named(in))}, nil
			}
			r.prov.FreeFunc = func(*provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
				return nil, status.Error(codes.Unknown, "PF ens1f0 is busy")
			}
		},
		wantMsg: "rollback: device vf1 stays set up, retried in the background: freeing device vf1: PF ens1f0 is busy",
		wantCalls: calls(freshCalls, setUps(
			"prov.Setup vf1", "state.RecordPrepared pool-a/vf1", "prov.Setup vf2",
		), []string{
			"prov.Free vf1",
			"state.AbortPrepare pool-a/vf2",
			"state.CommitPrepare pool-a/vf1",
			"state.MarkFreeFailed pool-a/vf1",
		}, prepareFailedEvent),
		wantRows: []string{"pool-a/vf1 PHASE_FREEING_FAILED uid-c1 pod=uid-web if=net1 pd"},
	},
	{
		name: "prepared already for another pod",
		rows: []*statev1.Allocation{
			row("c1", "old", "vf1", attached, nil), row("c1", "old", "vf2", attached, nil),
		},
		claim:     twoVFs,
		wantErr:   ErrClaimInUse,
		wantMsg:   "device vf1 is prepared for pod UID uid-old, not uid-web of pod default/web",
		wantCalls: calls(readCalls, prepareFailedEvent),
		wantRows: []string{
			"pool-a/vf1 PHASE_ATTACHED uid-c1 pod=uid-old if= pd",
			"pool-a/vf2 PHASE_ATTACHED uid-c1 pod=uid-old if= pd",
		},
	},
	{
		name:  "a device still being freed from an earlier use",
		rows:  []*statev1.Allocation{row("c1", "old", "vf1", freeingFailed, nil)},
		claim: twoVFs,
		change: func(r *rig) {
			r.prov.FreeFunc = func(*provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
				return nil, status.Error(codes.Unknown, "PF ens1f0 is busy")
			}
		},
		wantErr: ErrStillFreeing,
		wantMsg: "device vf1: device is still being freed: freeing device vf1: PF ens1f0 is busy",
		wantCalls: calls(readCalls, []string{
			"prov.Free vf1", "state.MarkFreeFailed pool-a/vf1",
		}, prepareFailedEvent),
		wantRows: []string{"pool-a/vf1 PHASE_FREEING_FAILED uid-c1 pod=uid-old if= pd"},
	},
	{
		name:        "a device freed now from an earlier use, then prepared",
		rows:        []*statev1.Allocation{row("c1", "old", "vf1", freeingFailed, nil)},
		claim:       twoVFs,
		wantDevices: twoVFsResult,
		wantCalls: calls(readCalls, []string{
			"prov.Free vf1", "state.DeleteAllocation pool-a/vf1",
		}, freshCalls[len(readCalls):], setUps(
			"prov.Setup vf1", "state.RecordPrepared pool-a/vf1", "prov.Setup vf2", "state.RecordPrepared pool-a/vf2",
		), []string{
			"state.CommitPrepare pool-a/vf1 pool-a/vf2",
			"state.ListAllocations claim=uid-c1", "claims.UpdateDeviceStatus node-a/pool-a/vf1 node-a/pool-a/vf2",
		}),
		wantRows: []string{
			"pool-a/vf1 PHASE_PREPARED uid-c1 pod=uid-web if=net1 pd",
			"pool-a/vf2 PHASE_PREPARED uid-c1 pod=uid-web if=net2 pd",
		},
	},
	{
		name: "prepared devices differ from the allocation: freed, prepared again",
		rows: []*statev1.Allocation{row("c1", "web", "vf3", prepared, nil)},
		claim: claimSpec{name: "c1", pods: []string{"web"},
			results: []resourceapi.DeviceRequestAllocationResult{result("net", "vf1")}},
		wantDevices: []deviceResult{{Requests: "[net]", Pool: testSlicePool, Device: "vf1"}},
		wantCalls: calls(readCalls, []string{
			"prov.Free vf3", "state.DeleteAllocation pool-a/vf3",
			"state.BeginPrepare pool-a/vf1", "prov.Setup vf1",
			"state.CommitPrepare pool-a/vf1",
			"state.ListAllocations claim=uid-c1", "claims.UpdateDeviceStatus node-a/pool-a/vf1",
		}),
		wantRows: []string{"pool-a/vf1 PHASE_PREPARED uid-c1 pod=uid-web if= pd"},
	},
	{
		name: "a left-over intent without status is rolled back, then prepared",
		rows: []*statev1.Allocation{row("c1", "web", "vf1", preparing, nil)},
		claim: claimSpec{name: "c1", pods: []string{"web"},
			results: []resourceapi.DeviceRequestAllocationResult{result("net", "vf1")}},
		wantDevices: []deviceResult{{Requests: "[net]", Pool: testSlicePool, Device: "vf1"}},
		wantCalls: calls(readCalls, []string{
			"state.ListDevices", "state.AbortPrepare pool-a/vf1",
			"state.BeginPrepare pool-a/vf1", "prov.Setup vf1",
			"state.CommitPrepare pool-a/vf1",
			"state.ListAllocations claim=uid-c1", "claims.UpdateDeviceStatus node-a/pool-a/vf1",
		}),
		wantRows: []string{"pool-a/vf1 PHASE_PREPARED uid-c1 pod=uid-web if= pd"},
	},
}

// run prepares the case's claim and checks the result, the calls, the
// state's rows and the event of a failure.
func (tt prepareCase) run(t *testing.T) {
	r := newRig(t, tt.rows...)
	if tt.change != nil {
		tt.change(r)
	}
	got, err := r.prepare(t, tt.claim.build())
	wantFail := tt.wantErr != nil || tt.wantMsg != ""
	switch {
	case wantFail && err == nil:
		t.Fatalf("prepare succeeded, want an error")
	case !wantFail && err != nil:
		t.Fatalf("prepare: %v", err)
	case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
		t.Errorf("error %q is not %q", err, tt.wantErr)
	case tt.wantMsg != "" && !strings.Contains(err.Error(), tt.wantMsg):
		t.Errorf("error %q does not say %q", err, tt.wantMsg)
	}
	if diff := cmp.Diff(tt.wantDevices, got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.wantCalls, setUpsSorted(r.rec.get())); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.wantRows, rowSummary(r.mem.snapshot())); diff != "" {
		t.Errorf("state rows (-want +got):\n%s", diff)
	}
	if tt.check != nil {
		tt.check(t, r)
	}
	if events := r.claims.getEvents(); wantFail && (len(events) != 1 || !strings.Contains(events[0], err.Error())) {
		t.Errorf("events %q, want one PrepareFailed event saying %q", events, err)
	}
}

func TestPrepare_StatusEntries(t *testing.T) {
	r := newRig(t)
	claim := twoVFs.build()
	if _, err := r.prepare(t, claim); err != nil {
		t.Fatal(err)
	}
	cond := []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "DevicePrepared",
		ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(testNow)}}
	want := []resourceapi.AllocatedDeviceStatus{
		{Driver: testDriver, Pool: testSlicePool, Device: "vf1", Conditions: cond,
			NetworkData: &resourceapi.NetworkDeviceData{InterfaceName: "net1", IPs: []string{"10.0.0.2/24"}, HardwareAddress: "02:00:00:00:00:01"}},
		{Driver: testDriver, Pool: testSlicePool, Device: "vf2", Conditions: cond,
			NetworkData: &resourceapi.NetworkDeviceData{InterfaceName: "net2", HardwareAddress: "02:00:00:00:00:02"}},
	}
	got := r.claims.getWritten("uid-c1")
	var data [][]byte
	for i := range got {
		data = append(data, got[i].Data.Raw)
		got[i].Data = nil
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status entries (-want +got):\n%s", diff)
	}
	// The data is StatusData: the prepared device the provisioner
	// returned and the parsed config.
	vlan := uint32(100)
	wantData := []struct {
		pd  *devicev1.PreparedDevice
		cfg *devicev1.DeviceConfig
	}{
		{preparedOf(deviceByName("vf1")), &devicev1.DeviceConfig{PodIfName: "net1", Vlan: &vlan, Addresses: []string{"10.0.0.2/24"}}},
		{preparedOf(deviceByName("vf2")), &devicev1.DeviceConfig{PodIfName: "net2"}},
	}
	for i, raw := range data {
		pdRaw, cfg, err := statusdata.Decode(raw)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		pd := &devicev1.PreparedDevice{}
		if err := protojsonUnmarshal(pdRaw, pd); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantData[i].pd, pd, protocmp.Transform()); diff != "" {
			t.Errorf("entry %d prepared device (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(wantData[i].cfg, cfg, protocmp.Transform()); diff != "" {
			t.Errorf("entry %d config (-want +got):\n%s", i, diff)
		}
		if !strings.HasPrefix(string(raw), `{"preparedDevice":{"device":{"name":"vf`) {
			t.Errorf("entry %d data %s is not compact StatusData", i, raw)
		}
	}
}

func TestPrepare_Idempotent(t *testing.T) {
	tests := []struct {
		name string
		// keepStatus puts the first prepare's status entries into the
		// claim given to the second.
		keepStatus bool
		wantCalls  []string
	}{
		{name: "prepared and recorded: nothing is done again", keepStatus: true,
			wantCalls: readCalls},
		{name: "status entries missing: rewritten from the state, no setup",
			wantCalls: calls(readCalls, []string{"claims.UpdateDeviceStatus node-a/pool-a/vf1 node-a/pool-a/vf2"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			if _, err := r.prepare(t, twoVFs.build()); err != nil {
				t.Fatal(err)
			}
			first := r.claims.getWritten("uid-c1")
			r.rec = &recorder{}
			r.state.rec, r.prov.rec, r.claims.rec = r.rec, r.rec, r.rec
			spec := twoVFs
			if tt.keepStatus {
				spec.status = first
			}
			got, err := r.prepare(t, spec.build())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(twoVFsResult, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, setUpsSorted(r.rec.get())); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(first, r.claims.getWritten("uid-c1")); diff != "" {
				t.Errorf("status (-first +now):\n%s", diff)
			}
		})
	}
}

// TestPrepare_OneAtATimePerClaim prepares the same claim from two calls at
// once: the second waits and finds it prepared, so each device is set up
// once.
func TestPrepare_OneAtATimePerClaim(t *testing.T) {
	r := newRig(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := r.prepare(t, twoVFs.build()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	setups := 0
	for _, c := range r.rec.get() {
		if strings.HasPrefix(c, "prov.Setup") {
			setups++
		}
	}
	if setups != 2 {
		t.Errorf("%d setups, want 2: %q", setups, r.rec.get())
	}
}

// TestPrepare_ClaimsConcurrently prepares claims of two pods in one call.
func TestPrepare_ClaimsConcurrently(t *testing.T) {
	r := newRig(t)
	a := claimSpec{name: "a", pods: []string{"web"}, results: []resourceapi.DeviceRequestAllocationResult{result("net", "vf1")},
		configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"podIfName":"net1"}`)}}
	b := claimSpec{name: "b", pods: []string{"web"}, results: []resourceapi.DeviceRequestAllocationResult{result("net", "vf2")},
		configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"podIfName":"net2"}`)}}
	c := claimSpec{name: "c", pods: []string{"db"}, results: []resourceapi.DeviceRequestAllocationResult{result("net", "vf3")},
		configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"podIfName":"net1"}`)}}
	res, err := r.d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{a.build(), b.build(), c.build()})
	if err != nil {
		t.Fatal(err)
	}
	for uid, pr := range res {
		if pr.Err != nil || len(pr.Devices) != 1 {
			t.Errorf("claim %s: %+v", uid, pr)
		}
	}
	want := []string{
		"pool-a/vf1 PHASE_PREPARED uid-a pod=uid-web if=net1 pd",
		"pool-a/vf2 PHASE_PREPARED uid-b pod=uid-web if=net2 pd",
		"pool-a/vf3 PHASE_PREPARED uid-c pod=uid-db if=net1 pd",
	}
	if diff := cmp.Diff(want, rowSummary(r.mem.snapshot())); diff != "" {
		t.Errorf("state rows (-want +got):\n%s", diff)
	}
}

// TestPrepare_PodIfNameRace prepares two claims of one pod asking for the
// same interface name at once: exactly one gets it. BeginPrepare is slowed
// down so that without the pod lock both claims would check the names
// before either recorded its intent.
func TestPrepare_PodIfNameRace(t *testing.T) {
	for range 5 {
		r := newRig(t)
		begin := r.state.BeginPrepareFunc
		r.state.BeginPrepareFunc = func(in *statev1.BeginPrepareRequest) (*statev1.BeginPrepareResponse, error) {
			time.Sleep(5 * time.Millisecond)
			return begin(in)
		}
		a := claimSpec{name: "a", pods: []string{"web"}, results: []resourceapi.DeviceRequestAllocationResult{result("net", "vf1")},
			configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"podIfName":"net1"}`)}}
		b := claimSpec{name: "b", pods: []string{"web"}, results: []resourceapi.DeviceRequestAllocationResult{result("net", "vf2")},
			configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"podIfName":"net1"}`)}}
		res, _ := r.d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{a.build(), b.build()})
		failed := 0
		for _, pr := range res {
			if errors.Is(pr.Err, ErrIfNameInUse) {
				failed++
			}
		}
		if failed != 1 {
			t.Fatalf("%d claims refused, want 1: %+v", failed, res)
		}
	}
}

// TestPrepare_ReadsAtOnce: a prepare's four reads (the pod, the claim's
// and the pod's allocations, the devices) are in flight together: each
// waits, up to a deadline, until all four have begun, which reads made
// one after the other never see.
func TestPrepare_ReadsAtOnce(t *testing.T) {
	r := newRig(t)
	const n = 4
	var mu sync.Mutex
	begun, all := 0, make(chan struct{})
	var together atomic.Int32
	wait := func() {
		mu.Lock()
		if begun++; begun == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			together.Add(1)
		case <-time.After(2 * time.Second):
		}
	}
	list, devs, pod := r.state.ListAllocationsFunc, r.state.ListDevicesFunc, r.d.podLookup
	r.state.ListAllocationsFunc = func(in *statev1.ListAllocationsRequest) (*statev1.ListAllocationsResponse, error) {
		mu.Lock()
		w := begun < n // the status writer's read, after the prepare's, does not wait
		mu.Unlock()
		if w {
			wait()
		}
		return list(in)
	}
	r.state.ListDevicesFunc = func(in *statev1.ListDevicesRequest) (*statev1.ListDevicesResponse, error) {
		wait()
		return devs(in)
	}
	r.d.podLookup = func(ctx context.Context, namespace, name string, uid types.UID) (*corev1.Pod, error) {
		wait()
		return pod(ctx, namespace, name, uid)
	}
	if _, err := r.prepare(t, twoVFs.build()); err != nil {
		t.Fatal(err)
	}
	if got := together.Load(); got != n {
		t.Fatalf("%d of the %d reads saw all %d in flight at once", got, n, n)
	}
}

// TestPrepare_RefusedPodBeforeAFailedRead: a pod that is refused is the
// error the claim gets, even when a read beside its check failed.
func TestPrepare_RefusedPodBeforeAFailedRead(t *testing.T) {
	r := newRig(t)
	r.pods["web"] = podOf("web")
	r.pods["web"].Spec.HostNetwork = true
	r.state.ListDevicesFunc = func(*statev1.ListDevicesRequest) (*statev1.ListDevicesResponse, error) {
		return nil, status.Error(codes.Unavailable, "state is restarting")
	}
	_, err := r.prepare(t, twoVFs.build())
	if !errors.Is(err, ErrHostNetwork) {
		t.Fatalf("error %v, want %v", err, ErrHostNetwork)
	}
	if rows := r.mem.snapshot(); len(rows) != 0 {
		t.Errorf("state rows %v, want none", rowSummary(rows))
	}
}

func TestConfigFor(t *testing.T) {
	d := newRig(t).d
	for _, tt := range configForCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := d.configFor(tt.configs, tt.request)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// configForCase is one case of TestConfigFor: the device config configFor
// makes of configs for request, or its error.
type configForCase struct {
	name    string
	configs []resourceapi.DeviceAllocationConfiguration
	request string
	want    *devicev1.DeviceConfig
	wantErr string
}

// fromClass is the source of a config from the device class.
const fromClass = resourceapi.AllocationConfigSourceClass

// vlanOf is v as the pointer a DeviceConfig's Vlan is.
func vlanOf(v uint32) *uint32 { return &v }

// configForCases are TestConfigFor's cases.
var configForCases = []configForCase{
	{name: "no config", request: "net", want: &devicev1.DeviceConfig{}},
	{name: "for all requests", request: "net",
		configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"podIfName":"net1"}`)},
		want:    &devicev1.DeviceConfig{PodIfName: "net1"}},
	{name: "for another request", request: "net",
		configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"podIfName":"net1"}`, "other")},
		want:    &devicev1.DeviceConfig{}},
	{name: "main request covers its subrequests", request: "net/fast",
		configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"podIfName":"net1"}`, "net")},
		want:    &devicev1.DeviceConfig{PodIfName: "net1"}},
	{name: "another driver's config is ignored", request: "net",
		configs: []resourceapi.DeviceAllocationConfiguration{opaque(fromClass, "gpu.example.com", `{"cores":4}`)},
		want:    &devicev1.DeviceConfig{}},
	{name: "class then claim: merged, the claim wins", request: "net",
		configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClass, testDriver, `{"vlan":100,"podIfName":"x","mtu":9000}`),
			claimConfig(`{"podIfName":"net1","mtu":null}`, "net"),
		},
		want: &devicev1.DeviceConfig{PodIfName: "net1", Vlan: vlanOf(100)}},
	{name: "merged config is validated whole", request: "net",
		configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClass, testDriver, `{"vlan":100}`), claimConfig(`{"vlanQoS":9}`),
		},
		wantErr: `request "net": config.vlanQoS: 9 is out of range 0..7`},
	{name: "key twice in one of several entries", request: "net",
		configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClass, testDriver, `{"vlan":100}`), claimConfig(`{"mtu":1500,"mtu":9000}`),
		},
		wantErr: `request "net": config.mtu: given twice`},
	{name: "not an object among several", request: "net",
		configs: []resourceapi.DeviceAllocationConfiguration{
			opaque(fromClass, testDriver, `{"vlan":100}`), claimConfig(`[1]`),
		},
		wantErr: `request "net": config.parameters: not a JSON object`},
	{name: "more addresses than a claim status holds", request: "net",
		configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"addresses":["10.0.0.1/24","10.0.0.2/24","10.0.0.3/24",
			"10.0.0.4/24","10.0.0.5/24","10.0.0.6/24","10.0.0.7/24","10.0.0.8/24","10.0.0.9/24","10.0.0.10/24","10.0.0.11/24",
			"10.0.0.12/24","10.0.0.13/24","10.0.0.14/24","10.0.0.15/24","10.0.0.16/24","10.0.0.17/24"]}`)},
		wantErr: `request "net": config.addresses: 17 addresses; a claim status holds at most 16`},
	{name: "an address twice", request: "net",
		configs: []resourceapi.DeviceAllocationConfiguration{claimConfig(`{"addresses":["10.0.0.1/24","10.0.0.1/24"]}`)},
		wantErr: `request "net": config.addresses[1]: 10.0.0.1/24 is given twice`},
	{name: "parameters as an object", request: "net",
		configs: []resourceapi.DeviceAllocationConfiguration{{Source: fromClass, DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: testDriver,
				Parameters: runtime.RawExtension{Object: &runtime.Unknown{Raw: []byte(`{"podIfName":"net1"}`), ContentType: runtime.ContentTypeJSON}}}}}},
		want: &devicev1.DeviceConfig{PodIfName: "net1"}},
}

// TestSteps: a prepare's log line names its steps in order, each with its time.
func TestSteps(t *testing.T) {
	var s steps
	s.start()
	s.done("pod")
	s.done("rows")
	if !regexp.MustCompile(`^pod=\d+\.\dms rows=\d+\.\dms$`).MatchString(s.String()) {
		t.Fatalf("steps %q", s.String())
	}
}

// statusdata, which links no Kubernetes package, holds the API's limit on a
// claim status entry's data.
func TestStatusDataMaxLength_IsTheAPIs(t *testing.T) {
	if statusdata.MaxLength != resourceapi.AllocatedDeviceStatusDataMaxLength {
		t.Fatalf("statusdata.MaxLength is %d, the API's limit %d", statusdata.MaxLength, resourceapi.AllocatedDeviceStatusDataMaxLength)
	}
}

// TestPrepare_StatusWriteAfterUnprepare: a status write after a prepare
// that comes once the claim was unprepared writes nothing.
func TestPrepare_StatusWriteAfterUnprepare(t *testing.T) {
	r := newRig(t)
	claim := twoVFs.build()
	if _, err := r.prepare(t, claim); err != nil {
		t.Fatal(err)
	}
	if res, err := r.d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{claimRef("c1")}); err != nil || res["uid-c1"] != nil {
		t.Fatalf("unprepare: %v %v", err, res)
	}
	before := len(r.rec.get())
	entries := r.claims.getWritten("uid-c1")
	done, err := r.d.writeStatusOnce(claim, []string{"pool-a/vf1", "pool-a/vf2"}, entries)
	if !done || err != nil {
		t.Fatalf("writeStatusOnce: done %v, %v; want done", done, err)
	}
	if diff := cmp.Diff([]string{"state.ListAllocations claim=uid-c1"}, r.rec.get()[before:]); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}
