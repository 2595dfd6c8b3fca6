//go:build !kernelrig

package server

import (
	"os"
	"slices"
	"testing"

	cmp "github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
)

// hostConfig configures the host manager on eth1, with the devices the
// caller's record has prepared (nil: no list).
func hostConfig(prepared []string) *provisionerv1.ConfigureRequest {
	req := &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Host: &provisionerv1.HostConfig{Enabled: true, IfNames: []string{"eth1"}}}}
	if prepared != nil {
		req.PreparedDevices = &provisionerv1.PreparedDevices{Devices: prepared}
	}
	return req
}

// armed sets eth1 up and waits until netdra's programs are on it, and
// returns their IDs (ingress, egress).
func (w *ebpfWorld) armed(t *testing.T) (*devicev1.PreparedDevice, []uint32) {
	t.Helper()
	setup, err := w.srv.Setup(ctxFor(t), setupOf(w.device(t), nil))
	if err != nil {
		t.Fatal(err)
	}
	w.srv.Wait() // the programs go on in the background
	on := w.onEth(t, "eth1")
	if len(on) != 2 {
		t.Fatalf("netdra's programs on eth1 after Setup: %v, want ingress and egress", on)
	}
	return setup.GetPreparedDevice(), on
}

// kill drops the provisioner as a kill -9 does: its process state goes,
// what it pinned stays.
func (w *ebpfWorld) kill() {
	w.srv.Close()
	w.srv.Wait()
	w.programs.Close()
}

// onEth returns the IDs of the tcx programs on a host interface, ingress
// then egress.
func (w *ebpfWorld) onEth(t *testing.T, ifName string) []uint32 {
	t.Helper()
	in, eg := ebpftest.TCX(t, w.host, ifName)
	var out []uint32
	for _, id := range slices.Concat(in, eg) {
		out = append(out, uint32(id))
	}
	return out
}

// TestSweep_RemovesWhatAKilledProvisionerLeft: a provisioner killed while
// netdra's programs were on a device (pinned links), and with netdra's
// programs on another interface that no link holds (an earlier build's
// hand-off gave them back as the host's). The next start keeps the
// device's programs while its record lists the device as prepared; once
// it does not, the sweep takes them off, and the ones no link holds, and
// leaves the host's programs and nothing on the bpffs.
func TestSweep_RemovesWhatAKilledProvisionerLeft(t *testing.T) {
	w := newEBPFWorld(t)
	nodetest.IP(t, "-n", w.host, "link", "add", "eth2", "type", "veth", "peer", "name", "eth2p")
	_, netdra := w.armed(t)
	for i, id := range netdra {
		ebpftest.AttachTCXRaw(t, w.host, "eth2", ebpftest.ProgramFromID(t, id), i == 0)
	}
	agent := ebpftest.AttachTCXRaw(t, w.host, "eth2", ebpftest.PassProgram(t, "agent"), true)
	w.kill()

	// eth1 still prepared (its claim's Free to come): its programs stay.
	w.start(t, hostConfig([]string{"eth1"}))
	w.srv.Wait() // the sweep
	if diff := cmp.Diff(netdra, w.onEth(t, "eth1")); diff != "" {
		t.Errorf("eth1, prepared, after the sweep (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint32{agent}, w.onEth(t, "eth2")); diff != "" {
		t.Errorf("eth2 after the sweep (-want +got):\n%s", diff)
	}
	w.kill()

	// eth1 freed meanwhile.
	w.start(t, hostConfig([]string{}))
	w.srv.Wait()
	if got := w.onEth(t, "eth1"); len(got) != 0 {
		t.Errorf("eth1, freed, after the sweep: %v, want nothing", got)
	}
	if diff := cmp.Diff([]uint32{agent}, w.onEth(t, "eth2")); diff != "" {
		t.Errorf("eth2 after the sweep (-want +got):\n%s", diff)
	}
	if ents, err := os.ReadDir(w.programs.Root()); err != nil || len(ents) != 0 {
		t.Errorf("left in %s after the sweep: %v %v", w.programs.Root(), ents, err)
	}
}

// TestSweep_SetupAfterAKillHandsOffTheHostsAlone: after a kill that left
// netdra's programs on a device, the next Setup (no list came: no sweep)
// records only the host's program as detached, and its Free puts the
// host's back and nothing of netdra's.
func TestSweep_SetupAfterAKillHandsOffTheHostsAlone(t *testing.T) {
	w := newEBPFWorld(t)
	pd, _ := w.armed(t)
	if _, err := w.srv.Free(ctxFor(t), &provisionerv1.FreeRequest{PreparedDevice: pd}); err != nil {
		t.Fatal(err)
	}
	w.srv.Wait()
	_, netdra := w.armed(t)
	w.kill() // after the claim's Free, before its programs came off
	agent := ebpftest.AttachTCXRaw(t, w.host, "eth1", ebpftest.PassProgram(t, "agent"), true)
	if diff := cmp.Diff([]uint32{netdra[0], agent, netdra[1]}, w.onEth(t, "eth1")); diff != "" {
		t.Fatalf("eth1 before the restart (-want +got):\n%s", diff)
	}

	w.start(t, hostConfig(nil))
	for range 2 { // the second claim finds what the first one's Free gave back
		setup, err := w.srv.Setup(ctxFor(t), setupOf(w.device(t), nil))
		if err != nil {
			t.Fatal(err)
		}
		want := []*devicev1.EbpfProgram{{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_INGRESS, ProgramId: agent, Name: "agent"}}
		if diff := cmp.Diff(want, setup.GetPreparedDevice().GetDetachedEbpfPrograms(), protocmp.Transform(), protocmp.IgnoreFields(&devicev1.EbpfProgram{}, "pin")); diff != "" {
			t.Errorf("detached programs (-want +got):\n%s", diff)
		}
		w.srv.Wait()
		if _, err := w.srv.Free(ctxFor(t), &provisionerv1.FreeRequest{PreparedDevice: setup.GetPreparedDevice()}); err != nil {
			t.Fatal(err)
		}
		w.srv.Wait()
		if diff := cmp.Diff([]uint32{agent}, w.onEth(t, "eth1")); diff != "" {
			t.Errorf("eth1 after Free (-want +got):\n%s", diff)
		}
	}
}
