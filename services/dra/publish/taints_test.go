package publish

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// TestTaints: a device whose link is down (no carrier, or a sub-interface
// whose parent is down or gone) is tainted with its pool's effect; a
// healthy one, an administratively down one (not in use) and one with no
// link to watch are not; None means no taint at all.
func TestTaints(t *testing.T) {
	noSchedule := []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: TaintValueNoCarrier, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	noExecute := []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: TaintValueNoCarrier, Effect: resourceapi.DeviceTaintEffectNoExecute}}
	for _, tc := range []struct {
		name   string
		effect string
		state  devicev1.LinkState
		want   []resourceapi.DeviceTaint
	}{
		{name: "down, default effect", state: devicev1.LinkState_LINK_STATE_DOWN, want: noSchedule},
		{name: "down, NoSchedule", effect: "NoSchedule", state: devicev1.LinkState_LINK_STATE_DOWN, want: noSchedule},
		{name: "down, NoExecute", effect: "NoExecute", state: devicev1.LinkState_LINK_STATE_DOWN, want: noExecute},
		{name: "down, None", effect: "None", state: devicev1.LinkState_LINK_STATE_DOWN},
		{name: "up", state: devicev1.LinkState_LINK_STATE_UP},
		{name: "admin down: not in use", state: devicev1.LinkState_LINK_STATE_ADMIN_DOWN},
		{name: "no link to watch", state: devicev1.LinkState_LINK_STATE_UNSPECIFIED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Taints(tc.effect, &devicev1.Device{Name: "veth0", LinkState: tc.state})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestResources_Taints: Resources taints each unhealthy device by its own
// pool's effect, and the taint goes once the link is back.
func TestResources_Taints(t *testing.T) {
	down := &devicev1.Device{Name: "a", LinkState: devicev1.LinkState_LINK_STATE_DOWN}
	up := &devicev1.Device{Name: "b", LinkState: devicev1.LinkState_LINK_STATE_UP}
	res := Resources([]Pool{
		{Name: "tainting", Devices: []*devicev1.Device{down, up}},
		{Name: "quiet", TaintEffect: "None", Devices: []*devicev1.Device{{Name: "c", LinkState: devicev1.LinkState_LINK_STATE_DOWN}}},
	})
	taints := func(pool string) map[string]int {
		out := map[string]int{}
		for _, d := range res.Pools[pool].Slices[0].Devices {
			out[d.Name] = len(d.Taints)
		}
		return out
	}
	if diff := cmp.Diff(map[string]int{"a": 1, "b": 0}, taints("tainting")); diff != "" {
		t.Errorf("tainting (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"c": 0}, taints("quiet")); diff != "" {
		t.Errorf("quiet (-want +got):\n%s", diff)
	}
	healed := &devicev1.Device{Name: "a", LinkState: devicev1.LinkState_LINK_STATE_UP}
	res = Resources([]Pool{{Name: "tainting", Devices: []*devicev1.Device{healed, up}}})
	if diff := cmp.Diff(map[string]int{"a": 0, "b": 0}, taints("tainting")); diff != "" {
		t.Errorf("healed (-want +got):\n%s", diff)
	}
}

// TestResources_IPPoolExhausted: while an address pool its NodeConfig pool
// names has no free address, every device of that pool carries one
// NoSchedule taint per such address pool (beside its unhealthy taint);
// the pools that name none of them are untouched; a free address again
// takes the taints off.
func TestResources_IPPoolExhausted(t *testing.T) {
	down := &devicev1.Device{Name: "a", LinkState: devicev1.LinkState_LINK_STATE_DOWN}
	up := &devicev1.Device{Name: "b", LinkState: devicev1.LinkState_LINK_STATE_UP}
	other := &devicev1.Device{Name: "c", LinkState: devicev1.LinkState_LINK_STATE_UP}
	specs := []Spec{{Name: "net", IPPools: []string{"blue", "red", "green"}}, {Name: "plain", IPPools: []string{"white"}}}
	ps := []Pool{{Name: "net", Devices: []*devicev1.Device{down, up}}, {Name: "plain", Devices: []*devicev1.Device{other}}}
	MarkExhausted(ps, specs, map[string]bool{"red": true, "blue": true, "black": true})
	res := Resources(ps)
	exhausted := func(pool string) map[string][]string {
		out := map[string][]string{}
		for _, d := range res.Pools[pool].Slices[0].Devices {
			out[d.Name] = []string{}
			for _, taint := range d.Taints {
				out[d.Name] = append(out[d.Name], taint.Key+"="+taint.Value+":"+string(taint.Effect))
			}
		}
		return out
	}
	want := map[string][]string{
		"a": {TaintUnhealthy + "=" + TaintValueNoCarrier + ":NoSchedule", TaintIPPoolExhausted + "=blue:NoSchedule", TaintIPPoolExhausted + "=red:NoSchedule"},
		"b": {TaintIPPoolExhausted + "=blue:NoSchedule", TaintIPPoolExhausted + "=red:NoSchedule"},
	}
	if diff := cmp.Diff(want, exhausted("net")); diff != "" {
		t.Errorf("net (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{"c": {}}, exhausted("plain")); diff != "" {
		t.Errorf("plain (-want +got):\n%s", diff)
	}
	MarkExhausted(ps, specs, map[string]bool{})
	res = Resources(ps)
	if diff := cmp.Diff(map[string][]string{"a": {TaintUnhealthy + "=" + TaintValueNoCarrier + ":NoSchedule"}, "b": {}}, exhausted("net")); diff != "" {
		t.Errorf("net after an address was freed (-want +got):\n%s", diff)
	}
}
