//go:build !kernelrig

package ebpf_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	cebpf "github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// orphanWorld is a host namespace with two veths, eth9 and eth8, and
// netdra's programs left on them by a provisioner that stopped without
// taking them off: on eth9 by pinned links (killed after a Free, before
// its programs came off), on eth8 attached without a link (what an earlier
// build's hand-off did when it gave netdra's programs back as the host's).
type orphanWorld struct {
	host, path string
	ns         netns.NsHandle
	bpffs      string
	linked     [2]cebpf.ProgramID // eth9: ingress, egress
	raw        [2]cebpf.ProgramID // eth8: ingress, egress
}

func newOrphanWorld(t *testing.T) *orphanWorld {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and attaches tcx programs")
	w := &orphanWorld{host: nodetest.Netns(t, "ndhost"), bpffs: ebpftest.BPFFS(t)}
	w.path = "/var/run/netns/" + w.host
	for _, l := range []string{"eth9", "eth8"} {
		nodetest.IP(t, "-n", w.host, "link", "add", l, "type", "veth", "peer", "name", l+"p")
	}
	var err error
	if w.ns, err = netns.GetFromName(w.host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.ns.Close() })

	// The "killed" provisioner: Attach, then its process state is
	// dropped (Close) without a Remove.
	killed, err := ebpf.New(nil, w.bpffs)
	if err != nil {
		t.Fatal(err)
	}
	if err := killed.Attach(context.Background(), "eth9", w.path, "eth9", ebpf.Policy{}); err != nil {
		t.Fatal(err)
	}
	killed.Close()
	in, eg := ebpftest.TCX(t, w.host, "eth9")
	if len(in) != 1 || len(eg) != 1 {
		t.Fatalf("netdra's programs on eth9: ingress %v, egress %v", in, eg)
	}
	w.linked = [2]cebpf.ProgramID{in[0], eg[0]}
	// The same programs on eth8 without a link.
	for i, id := range w.linked {
		prog, err := cebpf.NewProgramFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		w.raw[i] = cebpf.ProgramID(ebpftest.AttachTCXRaw(t, w.host, "eth8", prog, i == 0))
		prog.Close()
	}
	return w
}

// TestHandoff_TakeRemovesNetdrasOrphans: netdra's own programs on a host
// interface, whether a pinned link holds them or none does, are no host's:
// Take detaches them and records only the host's program, which Give puts
// back; netdra's stay off.
func TestHandoff_TakeRemovesNetdrasOrphans(t *testing.T) {
	w := newOrphanWorld(t)
	host := ebpftest.PassProgram(t, "agent_raw")
	hostID := cebpf.ProgramID(ebpftest.AttachTCXRaw(t, w.host, "eth8", host, true))
	h, err := ebpf.NewHandoff(nil, w.bpffs)
	if err != nil {
		t.Fatal(err)
	}
	for _, ifName := range []string{"eth9", "eth8"} {
		taken, err := h.Take(context.Background(), ifName, w.ns, ifName)
		if err != nil {
			t.Fatal(err)
		}
		var got []cebpf.ProgramID
		for _, p := range taken {
			got = append(got, cebpf.ProgramID(p.GetProgramId()))
		}
		var want []cebpf.ProgramID
		if ifName == "eth8" {
			want = []cebpf.ProgramID{hostID}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: taken (-want +got):\n%s", ifName, diff)
		}
		if in, eg := ebpftest.TCX(t, w.host, ifName); len(in)+len(eg) != 0 {
			t.Errorf("%s after Take: ingress %v, egress %v, want nothing", ifName, in, eg)
		}
		if fails := h.Give(context.Background(), ifName, w.ns, ifName, taken); len(fails) != 0 {
			t.Fatalf("Give: %v", fails)
		}
		in, eg := ebpftest.TCX(t, w.host, ifName)
		if diff := cmp.Diff(want, slices.Concat(in, eg)); diff != "" {
			t.Errorf("%s after Give (-want +got):\n%s", ifName, diff)
		}
	}
}

// TestHandoff_NameIsNotEnough: a host program that only bears the name of
// one of netdra's is the host's: handed off and given back.
func TestHandoff_NameIsNotEnough(t *testing.T) {
	testenv.RequireRoot(t, "creates network namespaces and attaches tcx programs")
	host := nodetest.Netns(t, "ndhost")
	nodetest.IP(t, "-n", host, "link", "add", "eth9", "type", "veth", "peer", "name", "eth9p")
	ns, err := netns.GetFromName(host)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	id := cebpf.ProgramID(ebpftest.AttachTCXRaw(t, host, "eth9", ebpftest.PassProgram(t, "netdra_ingress"), true))
	h, err := ebpf.NewHandoff(nil, ebpftest.BPFFS(t))
	if err != nil {
		t.Fatal(err)
	}
	taken, err := h.Take(context.Background(), "eth9", ns, "eth9")
	if err != nil {
		t.Fatal(err)
	}
	if len(taken) != 1 || cebpf.ProgramID(taken[0].GetProgramId()) != id {
		t.Fatalf("taken %v, want the host's program %d", taken, id)
	}
	if fails := h.Give(context.Background(), "eth9", ns, "eth9", taken); len(fails) != 0 {
		t.Fatalf("Give: %v", fails)
	}
	if in, _ := ebpftest.TCX(t, host, "eth9"); !slices.Equal(in, []cebpf.ProgramID{id}) {
		t.Errorf("ingress after Give: %v, want [%d]", in, id)
	}
}

// TestHandoff_GiveKeepsNetdrasOwnOff: a record of netdra's own program
// as a host's (what an earlier build's Take made, in a claim's status or
// pinned for a retried Setup) gets nothing attached at Give, and a Take
// drops its pin.
func TestHandoff_GiveKeepsNetdrasOwnOff(t *testing.T) {
	w := newOrphanWorld(t)
	h, err := ebpf.NewHandoff(nil, w.bpffs)
	if err != nil {
		t.Fatal(err)
	}
	rec := &devicev1.EbpfProgram{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_TCX_INGRESS, ProgramId: uint32(w.linked[0]), Name: "netdra_ingress"}
	pin := func(device string) string {
		dir := filepath.Join(h.Root(), device)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("%d_%d_0_0_0_0_0", rec.GetAttachPoint(), w.linked[0]))
		prog, err := cebpf.NewProgramFromID(w.linked[0])
		if err != nil {
			t.Fatal(err)
		}
		defer prog.Close()
		if err := prog.Pin(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nodetest.IP(t, "-n", w.host, "link", "add", "eth7", "type", "veth", "peer", "name", "eth7p")
	rec.Pin = pin("eth7")
	if fails := h.Give(context.Background(), "eth7", w.ns, "eth7", []*devicev1.EbpfProgram{rec}); len(fails) != 0 {
		t.Fatalf("Give: %v", fails)
	}
	if in, eg := ebpftest.TCX(t, w.host, "eth7"); len(in)+len(eg) != 0 {
		t.Errorf("eth7 after Give: ingress %v, egress %v, want nothing", in, eg)
	}
	if _, err := os.Stat(rec.Pin); !os.IsNotExist(err) {
		t.Errorf("the pin is left after Give: %v", err)
	}
	// Pinned by an earlier Take whose record was lost.
	p := pin("eth7")
	taken, err := h.Take(context.Background(), "eth7", w.ns, "eth7")
	if err != nil {
		t.Fatal(err)
	}
	if len(taken) != 0 {
		t.Errorf("taken %v, want nothing", taken)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the pin is left after Take: %v", err)
	}
}

// TestPrograms_RemoveStraysAndTidy: the sweep takes off netdra's programs
// that no link holds and leaves those of a pinned link (a device's, which
// Remove takes off) and the host's own; Tidy then leaves nothing of
// netdra's on the bpffs.
func TestPrograms_RemoveStraysAndTidy(t *testing.T) {
	w := newOrphanWorld(t)
	host := ebpftest.PassProgram(t, "agent_raw")
	hostID := cebpf.ProgramID(ebpftest.AttachTCXRaw(t, w.host, "eth8", host, true))
	p, err := ebpf.New(nil, w.bpffs)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if on, err := ebpftest.Attached(w.host, ebpftest.Netdra); err != nil || len(on) != 4 {
		t.Errorf("netdra's programs before the sweep: %v %v, want four", on, err)
	}
	strays, err := p.RemoveStrays(context.Background(), w.path)
	if err != nil {
		t.Fatal(err)
	}
	want := []ebpf.Stray{
		{Interface: "eth8", AttachPoint: "tcx ingress", Name: "netdra_ingress", ID: w.raw[0]},
		{Interface: "eth8", AttachPoint: "tcx egress", Name: "netdra_egress", ID: w.raw[1]},
	}
	if diff := cmp.Diff(want, strays); diff != "" {
		t.Errorf("strays (-want +got):\n%s", diff)
	}
	in, eg := ebpftest.TCX(t, w.host, "eth8")
	if diff := cmp.Diff([]cebpf.ProgramID{hostID}, slices.Concat(in, eg)); diff != "" {
		t.Errorf("eth8 after RemoveStrays (-want +got):\n%s", diff)
	}
	in, eg = ebpftest.TCX(t, w.host, "eth9")
	if diff := cmp.Diff(w.linked[:], slices.Concat(in, eg)); diff != "" {
		t.Errorf("eth9 after RemoveStrays (-want +got):\n%s", diff)
	}

	if err := p.Remove("eth9"); err != nil {
		t.Fatal(err)
	}
	if on, err := ebpftest.Attached(w.host, ebpftest.Netdra); err != nil || len(on) != 0 {
		t.Errorf("netdra's programs after Remove: %v %v, want none", on, err)
	}
	h, err := ebpf.NewHandoff(nil, w.bpffs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(h.Root(), "eth9"), 0o700); err != nil { // a Take killed before it pinned
		t.Fatal(err)
	}
	if err := p.Tidy(); err != nil {
		t.Fatal(err)
	}
	if err := h.Tidy(); err != nil {
		t.Fatal(err)
	}
	left, err := filepath.Glob(filepath.Join(w.bpffs, "netdra*"))
	if err != nil || len(left) != 0 {
		t.Errorf("left on the bpffs after Tidy: %v %v", left, err)
	}
}
