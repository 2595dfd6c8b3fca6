package subif

import (
	"testing"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
)

// A shared parent is published as one device with its capacity, healthy
// as its parent; each Setup of a share records the share and the egress
// rate its link will be held to, and changes nothing on the node.
func TestRun_SharedParent(t *testing.T) {
	w := newRunWorld(t, &provisionerv1.SubifParent{Name: "mvs", ParentIfName: "eth1", Kind: macvlan, Bandwidth: 1_000_000_000})
	devs := w.await(t, "the shared device up", func(d []*devicev1.Device) bool {
		return len(d) == 1 && d[0].GetLinkState() == devicev1.LinkState_LINK_STATE_UP
	})
	dev := devs[0]
	if dev.GetName() != "mvs" || dev.GetBandwidthCapacity() != 1_000_000_000 || dev.GetBandwidthDefault() != 1_000_000_000 {
		t.Fatalf("published %v, want mvs with 1G, default 1G (the whole)", dev)
	}
	for i, bw := range []uint64{50_000_000, 300_000_000} {
		dev.Share = &devicev1.Share{Id: []string{"s-one", "s-two"}[i], Bandwidth: bw}
		pd, err := w.m.Setup(t.Context(), dev, &devicev1.DeviceConfig{PodIfName: "net1"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := pd.GetDevice().GetSubInterface().GetEgressRate(); got != bw || pd.GetDevice().GetShare().GetId() != dev.Share.GetId() {
			t.Errorf("share %d: prepared %v, want the share and an egress rate of %d", i, pd.GetDevice(), bw)
		}
	}
	dev.Share = nil
	if _, err := w.m.Setup(t.Context(), dev, &devicev1.DeviceConfig{}, ""); err == nil {
		t.Error("Setup of the shared device without a share succeeded")
	}
}
