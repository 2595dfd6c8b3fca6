//go:build !kernelrig

// These tests need the host kernel (tcx, 6.6+) and iproute2; the kernel
// rig (6.1, busybox) runs rig_kernel_test.go instead.

package ebpf_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// hostPrograms is what a host attached to an interface: one program of
// each kind.
type hostPrograms struct {
	tcxLink, tcxRaw, tc, xdp cebpf.ProgramID
	held                     link.Link // the tcx link the "agent" holds
}

func attachHostPrograms(t *testing.T, ns, ifName string) hostPrograms {
	t.Helper()
	progLink := ebpftest.PassProgram(t, "agent_link")
	progRaw := ebpftest.PassProgram(t, "agent_raw")
	progTC := ebpftest.PassProgram(t, "agent_tc")
	progXDP := ebpftest.XDPPassProgram(t, "agent_xdp")
	var hp hostPrograms
	for _, p := range []struct {
		prog *cebpf.Program
		id   *cebpf.ProgramID
	}{{progLink, &hp.tcxLink}, {progRaw, &hp.tcxRaw}, {progTC, &hp.tc}, {progXDP, &hp.xdp}} {
		info, err := p.prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		*p.id, _ = info.ID()
	}
	err := ebpftest.In(ns, func() error {
		l, err := netlink.LinkByName(ifName)
		if err != nil {
			return err
		}
		idx := l.Attrs().Index
		if hp.held, err = link.AttachTCX(link.TCXOptions{Interface: idx, Program: progLink, Attach: cebpf.AttachTCXIngress}); err != nil {
			return err
		}
		if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: idx, Program: progRaw, Attach: cebpf.AttachTCXEgress}); err != nil {
			return err
		}
		if err := netlink.QdiscAdd(&netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}); err != nil {
			return err
		}
		if err := netlink.FilterAdd(&netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_INGRESS, Priority: 7, Handle: 3, Protocol: unix.ETH_P_ALL},
			Fd:          progTC.FD(), Name: "agent_tc", DirectAction: true,
		}); err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(l, progXDP.FD(), 1<<1) // generic
	})
	if err != nil {
		t.Fatalf("attaching the host's programs: %v", err)
	}
	t.Cleanup(func() { hp.held.Close() })
	return hp
}

// onLink is what is attached to an interface, by kind.
type onLink struct {
	TCXIngress, TCXEgress []cebpf.ProgramID
	TCIngress             []cebpf.ProgramID
	XDP                   cebpf.ProgramID
}

func programsOn(t *testing.T, ns, ifName string) onLink {
	t.Helper()
	var o onLink
	o.TCXIngress, o.TCXEgress = ebpftest.TCX(t, ns, ifName)
	err := ebpftest.In(ns, func() error {
		l, err := netlink.LinkByName(ifName)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			o.XDP = cebpf.ProgramID(x.ProgId)
		}
		fs, err := netlink.FilterList(l, netlink.HANDLE_MIN_INGRESS)
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return err
		}
		for _, f := range fs {
			if bf, ok := f.(*netlink.BpfFilter); ok {
				o.TCIngress = append(o.TCIngress, cebpf.ProgramID(bf.Id))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestHandoff_TakeAndGive(t *testing.T) {
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	host := nodetest.Netns(t, "ndhost")
	nodetest.IP(t, "-n", host, "link", "add", "eth9", "type", "veth", "peer", "name", "eth9p")
	hp := attachHostPrograms(t, host, "eth9")
	before := onLink{TCXIngress: []cebpf.ProgramID{hp.tcxLink}, TCXEgress: []cebpf.ProgramID{hp.tcxRaw}, TCIngress: []cebpf.ProgramID{hp.tc}, XDP: hp.xdp}
	if diff := cmp.Diff(before, programsOn(t, host, "eth9")); diff != "" {
		t.Fatalf("the host's programs (-want +got):\n%s", diff)
	}

	h, err := ebpf.NewHandoff(nil, ebpftest.BPFFS(t))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.GetFromName(host)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	taken, err := h.Take(context.Background(), "eth9", ns, "eth9")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(onLink{}, programsOn(t, host, "eth9")); diff != "" {
		t.Errorf("programs left on the interface after Take (-want +got):\n%s", diff)
	}
	want := []*devicev1.EbpfProgram{
		{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_INGRESS, ProgramId: uint32(hp.tcxLink), Name: "agent_link"},
		{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_EGRESS, ProgramId: uint32(hp.tcxRaw), Name: "agent_raw"},
		{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TC_INGRESS, ProgramId: uint32(hp.tc), Name: "agent_tc",
			TcPriority: 7, TcHandle: 3, TcDirectAction: true, TcProtocol: unix.ETH_P_ALL},
		{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_XDP, ProgramId: uint32(hp.xdp), Name: "agent_xdp", XdpFlags: 1 << 1},
	}
	if diff := cmp.Diff(want, taken, protocmp.Transform(), protocmp.IgnoreFields(&devicev1.EbpfProgram{}, "pin")); diff != "" {
		t.Errorf("taken (-want +got):\n%s", diff)
	}
	for _, p := range taken {
		if _, err := os.Stat(p.GetPin()); err != nil {
			t.Errorf("program %s not pinned: %v", p.GetName(), err)
		}
	}

	// A Take again (a Setup retried after its reply was lost) finds
	// nothing on the interface and returns what the first one pinned.
	again, err := h.Take(context.Background(), "eth9", ns, "eth9")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(taken, again, protocmp.Transform()); diff != "" {
		t.Errorf("Take again (-first +again):\n%s", diff)
	}

	// The pins keep the programs for Give.
	if fails := h.Give(context.Background(), "eth9", ns, "eth9", again); len(fails) != 0 {
		t.Fatalf("Give: %v", fails)
	}
	if diff := cmp.Diff(before, programsOn(t, host, "eth9")); diff != "" {
		t.Errorf("programs after Give (-want +got):\n%s", diff)
	}
	if ents, err := os.ReadDir(h.Root()); err != nil || len(ents) != 0 {
		t.Errorf("pins left after Give: %v %v", ents, err)
	}
}

func TestHandoff_GiveReportsWhatItCannot(t *testing.T) {
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	host := nodetest.Netns(t, "ndhost")
	nodetest.IP(t, "-n", host, "link", "add", "eth9", "type", "veth", "peer", "name", "eth9p")
	h, err := ebpf.NewHandoff(nil, ebpftest.BPFFS(t))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.GetFromName(host)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	// A program pinned before a reboot: the pin is gone.
	lost := []*devicev1.EbpfProgram{{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_INGRESS, ProgramId: 42, Name: "lost", Pin: h.Root() + "/eth9/gone"}}
	fails := h.Give(context.Background(), "eth9", ns, "eth9", lost)
	if len(fails) != 1 {
		t.Fatalf("Give reported %v, want one failure", fails)
	}
	t.Log(fails[0])
	if diff := cmp.Diff(onLink{}, programsOn(t, host, "eth9")); diff != "" {
		t.Errorf("programs (-want +got):\n%s", diff)
	}
}

// TestHandoff_GiveRefusesForeignPins: Give loads only pins the hand-off
// made, in the device's directory; a prepared device naming another pin
// (a claim status tampered with) gets nothing attached.
func TestHandoff_GiveRefusesForeignPins(t *testing.T) {
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	host := nodetest.Netns(t, "ndhost")
	nodetest.IP(t, "-n", host, "link", "add", "eth9", "type", "veth", "peer", "name", "eth9p")
	h, err := ebpf.NewHandoff(nil, ebpftest.BPFFS(t))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.GetFromName(host)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	for _, pin := range []string{h.Root() + "/eth8/x", h.Root() + "/../x", "/sys/fs/bpf/x"} {
		foreign := []*devicev1.EbpfProgram{{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_INGRESS, ProgramId: 42, Name: "foreign", Pin: pin}}
		fails := h.Give(context.Background(), "eth9", ns, "eth9", foreign)
		if len(fails) != 1 || !strings.Contains(fails[0].Error(), "where the hand-off keeps them") {
			t.Errorf("Give of a program pinned at %s: %v, want it refused", pin, fails)
		}
	}
}
