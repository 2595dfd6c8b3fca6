//go:build kernelrig

package ebpf_test

// The kernel rig boots Debian's 6.1 kernel: no tcx (6.6+), and none of the
// tc modules (sch_ingress for clsact, cls_bpf) among the modules the rig
// loads. What it tests here: the hand-off of an XDP program on a dummy
// link, and that netdra's programs refuse clearly to attach without tcx
// and leave nothing behind. Software VLAN, the spoof check and the
// counters run on the host kernel (programs_netns_test.go).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	cebpf "github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

// rigNetns creates the named netns name with a dummy link dummyName in it.
func rigNetns(t *testing.T, name, dummyName string) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	t.Cleanup(func() { _ = netns.DeleteNamed(name) })
	lerr := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: dummyName}})
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	if lerr != nil {
		t.Fatalf("adding %s: %v", dummyName, lerr)
	}
}

func TestKernel_HandoffXDPOnDummy(t *testing.T) {
	kernelrig.Require(t)
	rigNetns(t, "ebpfho", "dummy7")
	xdp := ebpftest.XDPPassProgram(t, "agent_xdp")
	info, err := xdp.Info()
	if err != nil {
		t.Fatal(err)
	}
	xdpID, _ := info.ID()
	xdpOn := func() uint32 {
		var id uint32
		if err := ebpftest.In("ebpfho", func() error {
			l, err := netlink.LinkByName("dummy7")
			if err != nil {
				return err
			}
			if x := l.Attrs().Xdp; x != nil && x.Attached {
				id = x.ProgId
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	if err := ebpftest.In("ebpfho", func() error {
		l, err := netlink.LinkByName("dummy7")
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(l, xdp.FD(), 1<<1)
	}); err != nil {
		t.Fatal(err)
	}
	if got := xdpOn(); got != uint32(xdpID) {
		t.Fatalf("XDP program on dummy7: %d, want %d", got, xdpID)
	}

	h, err := ebpf.NewHandoff(nil, ebpftest.BPFFS(t))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.GetFromName("ebpfho")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	taken, err := h.Take(context.Background(), "dummy7", ns, "dummy7")
	if err != nil {
		t.Fatal(err)
	}
	want := []*devicev1.EbpfProgram{{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_XDP, ProgramId: uint32(xdpID), Name: "agent_xdp", XdpFlags: 1 << 1}}
	if diff := cmp.Diff(want, taken, protocmp.Transform(), protocmp.IgnoreFields(&devicev1.EbpfProgram{}, "pin")); diff != "" {
		t.Errorf("taken (-want +got):\n%s", diff)
	}
	if got := xdpOn(); got != 0 {
		t.Errorf("XDP program %d left on dummy7 after Take", got)
	}
	if fails := h.Give(context.Background(), "dummy7", ns, "dummy7", taken); len(fails) != 0 {
		t.Fatal(fails)
	}
	if got := xdpOn(); got != uint32(xdpID) {
		t.Errorf("XDP program on dummy7 after Give: %d, want %d", got, xdpID)
	}
	if ents, err := os.ReadDir(h.Root()); err != nil || len(ents) != 0 {
		t.Errorf("pins left: %v %v", ents, err)
	}
}

func TestKernel_AttachWithoutTCX(t *testing.T) {
	kernelrig.Require(t)
	rigNetns(t, "ebpfnotcx", "dummy8")
	progs, err := ebpf.New(nil, ebpftest.BPFFS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(progs.Close)
	err = progs.Attach(context.Background(), "dummy8", "/var/run/netns/ebpfnotcx", "dummy8", ebpf.Policy{})
	if !errors.Is(err, cebpf.ErrNotSupported) {
		t.Fatalf("Attach on a kernel without tcx = %v, want ErrNotSupported", err)
	}
	t.Log(err)
	for _, name := range []string{"ingress", "egress"} {
		if _, err := os.Stat(filepath.Join(progs.Root(), "dummy8", name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pinned %s link left: %v", name, err)
		}
	}
	if err := progs.Remove("dummy8"); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(progs.Root()); err != nil || len(ents) != 0 {
		t.Errorf("left after Remove: %v %v", ents, err)
	}
}
