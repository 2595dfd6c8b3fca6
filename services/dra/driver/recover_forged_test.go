package driver

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/publish"
)

// TestRecover_ForgedStatus: after a reboot (empty state) a claim status
// that fails a check is not restored, the device it names is not touched
// (no Setup, no Free), a RecoveryRefused event on the claim says why, and
// the claim's other devices and Recover go on. The provisioner's own
// checks of the prepared device (inventory, managers' rules) are
// services/provisioner/server's TestRestore_ForgedStatusData.
func TestRecover_ForgedStatus(t *testing.T) {
	entries, _ := preparedClaim(t, twoVFs)
	forged := forgery(entries)
	for _, cases := range [][]forgedCase{forgedDataCases(forged), forgedClaimCases(forged)} {
		for _, tt := range cases {
			t.Run(tt.name, tt.run)
		}
	}
}

// forgedCase is one case of TestRecover_ForgedStatus: Recover of claim on
// an empty state (after change), and the rows and events it must leave.
type forgedCase struct {
	name     string
	claim    claimSpec
	change   func(*rig)
	restored []string // the rows after, pool/device
	events   []string // substrings, in order
}

// forgery returns what makes the claim twoVFs with its status entries,
// entries (copies), forged by f.
func forgery(entries []resourceapi.AllocatedDeviceStatus) func(f func(c *claimSpec, st []resourceapi.AllocatedDeviceStatus)) claimSpec {
	return func(f func(c *claimSpec, st []resourceapi.AllocatedDeviceStatus)) claimSpec {
		return with(twoVFs, func(c *claimSpec) {
			st := make([]resourceapi.AllocatedDeviceStatus, len(entries))
			for i, e := range entries {
				st[i] = *e.DeepCopy()
			}
			f(c, st)
			c.status = st
		})
	}
}

// forgedDataCases are the cases of a status entry's data forged.
func forgedDataCases(forged func(func(*claimSpec, []resourceapi.AllocatedDeviceStatus)) claimSpec) []forgedCase {
	return []forgedCase{
		{
			name: "truncated data",
			claim: forged(func(_ *claimSpec, st []resourceapi.AllocatedDeviceStatus) {
				st[0].Data.Raw = st[0].Data.Raw[:len(st[0].Data.Raw)/2]
			}),
			restored: []string{"pool-a/vf2"},
			events:   []string{"device vf1 not restored after a restart, nothing done to its devices: claim status data is not a netdra prepared device: unexpected EOF"},
		},
		{
			name: "an unknown field",
			claim: forged(func(_ *claimSpec, st []resourceapi.AllocatedDeviceStatus) {
				st[1].Data.Raw = append(st[1].Data.Raw[:len(st[1].Data.Raw)-1], []byte(`,"netnsPath":"/proc/1/ns/net"}`)...)
			}),
			restored: []string{"pool-a/vf1"},
			events:   []string{`device vf2 not restored after a restart, nothing done to its devices: claim status data is not a netdra prepared device: json: unknown field "netnsPath"`},
		},
		{
			name: "another device's data",
			claim: forged(func(_ *claimSpec, st []resourceapi.AllocatedDeviceStatus) {
				st[0].Data = st[1].Data.DeepCopy()
			}),
			restored: []string{"pool-a/vf2"},
			events:   []string{`device vf1 not restored after a restart, nothing done to its devices: claim status data is not a netdra prepared device: prepared device "vf2" for device "vf1"`},
		},
	}
}

// forgedClaimCases are the cases of a claim whose status names a pool,
// a device or pods it must not, or whose pod is on the host network.
func forgedClaimCases(forged func(func(*claimSpec, []resourceapi.AllocatedDeviceStatus)) claimSpec) []forgedCase {
	return []forgedCase{
		{
			name: "a pool the node does not have",
			claim: forged(func(c *claimSpec, st []resourceapi.AllocatedDeviceStatus) {
				c.results[0].Pool, st[0].Pool = "node-a/pool-z", "node-a/pool-z"
			}),
			restored: []string{"pool-a/vf2"},
			events:   []string{`device vf1 not restored after a restart, nothing done to its devices: claim status data is not a netdra prepared device: no pool "pool-z" is configured on this node`},
		},
		{
			name: "another node's pool",
			claim: forged(func(c *claimSpec, st []resourceapi.AllocatedDeviceStatus) {
				c.results[0].Pool, st[0].Pool = "node-b/pool-a", "node-b/pool-a"
			}),
			restored: []string{"pool-a/vf2"},
			events:   []string{`device vf1 not restored after a restart, nothing done to its devices: claim status data is not a netdra prepared device: pool "node-b/pool-a" is not a pool of node "node-a"`},
		},
		{
			name:  "a pool that does not offer the device",
			claim: forged(func(*claimSpec, []resourceapi.AllocatedDeviceStatus) {}),
			change: func(r *rig) {
				r.d.pools = []publish.Spec{{Name: testPool, Filter: publish.Filter{DeviceManagers: []string{"dummy"}}}}
			},
			events: []string{
				`device vf1 not restored after a restart, nothing done to its devices: claim status data is not a netdra prepared device: pool "pool-a" does not select device vf1`,
				`device vf2 not restored`,
			},
		},
		{
			name: "reserved for two pods",
			claim: forged(func(c *claimSpec, _ []resourceapi.AllocatedDeviceStatus) {
				c.pods = []string{"web", "other"}
			}),
			events: []string{"not restored after a restart, nothing done to its devices: claim status data is not a netdra prepared device: a claim with network devices must be reserved for exactly one pod; it is reserved for 2"},
		},
		{
			name:  "a host-network pod",
			claim: forged(func(*claimSpec, []resourceapi.AllocatedDeviceStatus) {}),
			change: func(r *rig) {
				p := podOf("web")
				p.Spec.HostNetwork = true
				r.pods["web"] = p
			},
			events: []string{"pod uses the host network"},
		},
		{
			name: "a status entry for a device the allocation does not list is not read",
			claim: forged(func(_ *claimSpec, st []resourceapi.AllocatedDeviceStatus) {
				st[0].Device, st[0].Data = "vf3", &runtime.RawExtension{Raw: st[0].Data.Raw}
			}),
			restored: []string{"pool-a/vf2"},
		},
	}
}

// run recovers the case's claim and checks the rows restored, the events
// and that no refused status reached the node.
func (tt forgedCase) run(t *testing.T) {
	r := newRig(t)
	if tt.change != nil {
		tt.change(r)
	}
	if err := r.d.Recover(context.Background(), []*resourceapi.ResourceClaim{tt.claim.build()}); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	var got []string
	for _, a := range r.mem.snapshot() {
		got = append(got, a.GetPool()+"/"+a.GetDeviceName())
		if a.GetPhase() != prepared {
			t.Errorf("%s restored as %s", a.GetDeviceName(), a.GetPhase())
		}
	}
	if diff := cmp.Diff(tt.restored, got); diff != "" {
		t.Errorf("restored (-want +got):\n%s", diff)
	}
	events := r.claims.getEvents()
	if len(events) != len(tt.events) {
		t.Fatalf("events %q, want %d", events, len(tt.events))
	}
	for i, want := range tt.events {
		if !strings.Contains(events[i], "Warning "+ReasonRecoveryRefused) || !strings.Contains(events[i], want) {
			t.Errorf("event %q, want a %s one with %q", events[i], ReasonRecoveryRefused, want)
		}
	}
	for _, c := range r.rec.get() {
		if strings.HasPrefix(c, "prov.Setup") || strings.HasPrefix(c, "prov.Free") {
			t.Errorf("a refused status reached the node: %s", c)
		}
	}
}

// TestRecover_IntentKeepsItsRecordedDevice: an interrupted prepare whose
// status was written is completed with the prepared device recorded on
// its intent right after Setup (the state's own record), not with the one
// the status holds, which anyone who can write the status may have
// changed.
func TestRecover_IntentKeepsItsRecordedDevice(t *testing.T) {
	entries, _ := preparedClaim(t, twoVFs)
	recorded := preparedOf(deviceByName("vf1"))
	recorded.OriginalVf = &devicev1.VfSnapshot{MacAddress: "02:00:00:00:00:01", Vlan: 7, SpoofChk: true}
	intent := row("c1", "web", "vf1", preparing, nil)
	intent.PreparedDevice = proto.CloneOf(recorded)
	spec := with(twoVFs, func(c *claimSpec) { c.status = entries })
	r := newRig(t, intent)
	if err := r.d.Recover(context.Background(), []*resourceapi.ResourceClaim{spec.build()}); err != nil {
		t.Fatal(err)
	}
	rows := r.mem.snapshot()
	i := slices.IndexFunc(rows, func(a *statev1.Allocation) bool { return a.GetDeviceName() == "vf1" })
	if i < 0 || rows[i].GetPhase() != prepared {
		t.Fatalf("rows %v, want vf1 prepared", rowSummary(rows))
	}
	if diff := cmp.Diff(recorded, rows[i].GetPreparedDevice(), protocmp.Transform()); diff != "" {
		t.Errorf("prepared device (-recorded +committed):\n%s", diff)
	}
}
