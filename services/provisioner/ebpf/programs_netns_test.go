//go:build !kernelrig

// These tests need the host kernel (tcx, 6.6+) and iproute2; the kernel
// rig (6.1, busybox) runs rig_kernel_test.go instead.

package ebpf_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	cebpf "github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"

	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// wait bounds how long a failing test waits for a frame; it asserts no
// speed.
const wait = 20 * time.Second

// pair is a veth between a "pod" namespace (pod0, the device) and a "wire"
// namespace (wire0, the far end).
type pair struct {
	pod, wire string
	mac       net.HardwareAddr
	netns     string // the pod netns path
}

func newPair(t *testing.T) pair {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	p := pair{pod: nodetest.Netns(t, "ndpod"), wire: nodetest.Netns(t, "ndwire")}
	p.mac, _ = net.ParseMAC("02:00:00:00:aa:01")
	p.netns = "/var/run/netns/" + p.pod
	// No IPv6: its neighbour discovery would add frames to the counters.
	for _, ns := range []string{p.pod, p.wire} {
		nodetest.IP(t, "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	nodetest.IP(t, "-n", p.pod, "link", "add", "pod0", "address", p.mac.String(), "type", "veth", "peer", "name", "wire0", "netns", p.wire)
	nodetest.IP(t, "-n", p.pod, "link", "set", "pod0", "up")
	nodetest.IP(t, "-n", p.wire, "link", "set", "wire0", "up")
	ebpftest.WaitOperational(t, p.pod, "pod0")
	ebpftest.WaitOperational(t, p.wire, "wire0")
	return p
}

func newPrograms(t *testing.T) *ebpf.Programs {
	t.Helper()
	p, err := ebpf.New(nil, ebpftest.BPFFS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func frame(src net.HardwareAddr, seq byte) ebpftest.Frame {
	return ebpftest.Frame{Src: src, Seq: seq}
}

func tagged(src net.HardwareAddr, seq byte, tpid, tci uint16) ebpftest.Frame {
	return ebpftest.Frame{Src: src, Seq: seq, Tagged: true, TPID: tpid, TCI: tci}
}

// counters polls until the device's counters equal want (frames dropped
// on ingress are counted when the far end's frames are processed, which
// follows the send), failing after wait.
func counters(t *testing.T, p *ebpf.Programs, device string, want ebpf.Counters) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got, err := p.Counters(device)
		if err != nil {
			t.Fatal(err)
		}
		if got == want || time.Now().After(deadline) {
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("counters (-want +got):\n%s", diff)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func seqs(fs []ebpftest.Frame) []byte {
	var out []byte
	for _, f := range fs {
		out = append(out, f.Seq)
	}
	return out
}

func TestSoftwareVLANAndSpoofCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proto uint16
	}{
		{"802.1Q", ebpf.EtherType8021Q},
		{"802.1ad", ebpf.EtherType8021AD},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := newPair(t)
			progs := newPrograms(t)
			pol := ebpf.Policy{SpoofChk: true, MAC: pr.mac, VLAN: 100, QoS: 5, Proto: tc.proto}
			if err := progs.Attach(context.Background(), "dev0", pr.netns, "pod0", pol); err != nil {
				t.Fatal(err)
			}
			wantTCI := uint16(100 | 5<<13)
			other, _ := net.ParseMAC("02:00:00:00:bb:02")

			// Egress: the pod's own frames leave tagged, spoofed ones are dropped.
			out, err := ebpftest.Listen(pr.wire, "wire0")
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			dropped, err := ebpftest.Send(pr.pod, "pod0", frame(pr.mac, 1), frame(other, 2), frame(other, 3), frame(pr.mac, 4))
			if err != nil {
				t.Fatal(err)
			}
			if dropped != 2 {
				t.Errorf("the kernel refused %d sends, want 2 (the spoofed frames)", dropped)
			}
			got, err := out.Until(4, wait)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]byte{1, 4}, seqs(got)); diff != "" {
				t.Errorf("frames on the wire (-want +got):\n%s", diff)
			}
			for _, f := range got {
				if !f.Tagged || f.TPID != tc.proto || f.TCI != wantTCI {
					t.Errorf("frame %d on the wire: tagged %v TPID %#x TCI %#x, want TPID %#x TCI %#x", f.Seq, f.Tagged, f.TPID, f.TCI, tc.proto, wantTCI)
				}
			}

			// Ingress: only frames tagged with VLAN 100 (any priority) and
			// the protocol reach the pod, untagged.
			in, err := ebpftest.ListenDelivered(pr.pod, "pod0")
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			otherProto := uint16(ebpf.EtherType8021AD)
			if tc.proto == otherProto {
				otherProto = ebpf.EtherType8021Q
			}
			if _, err := ebpftest.Send(pr.wire, "wire0",
				tagged(other, 10, tc.proto, 100),
				frame(other, 11),                   // untagged
				tagged(other, 12, tc.proto, 200),   // another VLAN
				tagged(other, 13, otherProto, 100), // another protocol
				tagged(other, 14, tc.proto, 100|7<<13),
			); err != nil {
				t.Fatal(err)
			}
			got, err = in.Until(14, wait)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]byte{10, 14}, seqs(got)); diff != "" {
				t.Errorf("frames in the pod (-want +got):\n%s", diff)
			}
			for _, f := range got {
				if f.Tagged {
					t.Errorf("frame %d reached the pod tagged (TPID %#x TCI %#x)", f.Seq, f.TPID, f.TCI)
				}
			}
			// Frames are 60 bytes on the wire, tag included; the kernel
			// takes a received tag out of the frame before tc ingress (56
			// bytes left), and a pushed tag is added after counting.
			counters(t, progs, "dev0", ebpf.Counters{
				TxPackets: 2, TxBytes: 120,
				SpoofDropPackets: 2, SpoofDropBytes: 120,
				RxPackets: 2, RxBytes: 2 * 56,
				VlanDropPackets: 3, VlanDropBytes: 60 + 2*56,
			})
		})
	}
}

func TestCountersOnlyPassEverything(t *testing.T) {
	pr := newPair(t)
	progs := newPrograms(t)
	if err := progs.Attach(context.Background(), "dev0", pr.netns, "pod0", ebpf.Policy{}); err != nil {
		t.Fatal(err)
	}
	other, _ := net.ParseMAC("02:00:00:00:bb:02")
	out, err := ebpftest.Listen(pr.wire, "wire0")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	in, err := ebpftest.ListenDelivered(pr.pod, "pod0")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if n, err := ebpftest.Send(pr.pod, "pod0", frame(pr.mac, 1), frame(other, 2), frame(pr.mac, 3)); err != nil || n != 0 {
		t.Fatalf("send: %d dropped, %v", n, err)
	}
	got, err := out.Until(3, wait)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]byte{1, 2, 3}, seqs(got)); diff != "" {
		t.Errorf("frames on the wire (-want +got):\n%s", diff)
	}
	for _, f := range got {
		if f.Tagged {
			t.Errorf("frame %d tagged without a VLAN policy", f.Seq)
		}
	}
	if _, err := ebpftest.Send(pr.wire, "wire0", frame(other, 20), tagged(other, 21, 0x8100, 7)); err != nil {
		t.Fatal(err)
	}
	got, err = in.Until(21, wait)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]byte{20, 21}, seqs(got)); diff != "" {
		t.Errorf("frames in the pod (-want +got):\n%s", diff)
	}
	counters(t, progs, "dev0", ebpf.Counters{TxPackets: 3, TxBytes: 180, RxPackets: 2, RxBytes: 60 + 56})
}

// TestPinnedAcrossRestart: the programs stay attached with no process
// holding them, a new Programs (a restarted provisioner) finds the
// counters and re-attaching is a no-op that keeps them; Detach and Remove
// leave nothing.
func TestPinnedAcrossRestartAndRemove(t *testing.T) {
	pr := newPair(t)
	fs := ebpftest.BPFFS(t)
	first, err := ebpf.New(nil, fs)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Attach(context.Background(), "dev0", pr.netns, "pod0", ebpf.Policy{}); err != nil {
		t.Fatal(err)
	}
	ing, eg := ebpftest.TCX(t, pr.pod, "pod0")
	if len(ing) != 1 || len(eg) != 1 {
		t.Fatalf("tcx programs on pod0: ingress %v egress %v, want one each", ing, eg)
	}
	if _, err := ebpftest.Send(pr.pod, "pod0", frame(pr.mac, 1)); err != nil {
		t.Fatal(err)
	}
	first.Close() // the process ends: only the pins hold the programs

	restarted, err := ebpf.New(nil, fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restarted.Close)
	counters(t, restarted, "dev0", ebpf.Counters{TxPackets: 1, TxBytes: 60})
	if err := restarted.Attach(context.Background(), "dev0", pr.netns, "pod0", ebpf.Policy{}); err != nil {
		t.Fatal(err)
	}
	ing2, eg2 := ebpftest.TCX(t, pr.pod, "pod0")
	if diff := cmp.Diff([][]cebpf.ProgramID{ing, eg}, [][]cebpf.ProgramID{ing2, eg2}); diff != "" {
		t.Errorf("programs after an attach again (-before +after):\n%s", diff)
	}
	counters(t, restarted, "dev0", ebpf.Counters{TxPackets: 1, TxBytes: 60})
	devs, err := restarted.Devices()
	if err != nil || len(devs) != 1 || devs[0] != "dev0" {
		t.Errorf("Devices() = %v, %v; want [dev0]", devs, err)
	}

	if err := restarted.Detach("dev0"); err != nil {
		t.Fatal(err)
	}
	if ing, eg := ebpftest.TCX(t, pr.pod, "pod0"); len(ing)+len(eg) != 0 {
		t.Errorf("programs left after Detach: ingress %v egress %v", ing, eg)
	}
	counters(t, restarted, "dev0", ebpf.Counters{TxPackets: 1, TxBytes: 60})
	for range 2 { // idempotent
		if err := restarted.Remove("dev0"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := restarted.Counters("dev0"); !errors.Is(err, ebpf.ErrNotAttached) {
		t.Errorf("Counters after Remove: %v, want ErrNotAttached", err)
	}
	if _, err := os.Stat(filepath.Join(restarted.Root(), "dev0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory left after Remove: %v", err)
	}
}

// TestReattachReusesLoadedPrograms: a device attached again after Detach
// (its next pod) gets the programs loaded at its first attach (the same
// program IDs: no new load, no verifier run) with the new policy, and its
// counters go on; after Remove it gets freshly loaded ones.
func TestReattachReusesLoadedPrograms(t *testing.T) {
	pr := newPair(t)
	progs := newPrograms(t)
	ctx := context.Background()
	if err := progs.Attach(ctx, "dev0", pr.netns, "pod0", ebpf.Policy{}); err != nil {
		t.Fatal(err)
	}
	ing, eg := ebpftest.TCX(t, pr.pod, "pod0")
	if _, err := ebpftest.Send(pr.pod, "pod0", frame(pr.mac, 1)); err != nil {
		t.Fatal(err)
	}
	if err := progs.Detach("dev0"); err != nil {
		t.Fatal(err)
	}
	if err := progs.Attach(ctx, "dev0", pr.netns, "pod0", ebpf.Policy{SpoofChk: true, MAC: pr.mac}); err != nil {
		t.Fatal(err)
	}
	ing2, eg2 := ebpftest.TCX(t, pr.pod, "pod0")
	if diff := cmp.Diff([][]cebpf.ProgramID{ing, eg}, [][]cebpf.ProgramID{ing2, eg2}); diff != "" {
		t.Errorf("programs after Detach and Attach (-first +again):\n%s", diff)
	}
	other, _ := net.ParseMAC("02:00:00:00:99:99")
	dropped, err := ebpftest.Send(pr.pod, "pod0", frame(pr.mac, 2), frame(other, 3))
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 1 {
		t.Errorf("the kernel refused %d sends, want 1 (the spoofed frame): the new policy is not in force", dropped)
	}
	counters(t, progs, "dev0", ebpf.Counters{TxPackets: 2, TxBytes: 120, SpoofDropPackets: 1, SpoofDropBytes: 60})

	if err := progs.Remove("dev0"); err != nil {
		t.Fatal(err)
	}
	if err := progs.Attach(ctx, "dev0", pr.netns, "pod0", ebpf.Policy{}); err != nil {
		t.Fatal(err)
	}
	ing3, eg3 := ebpftest.TCX(t, pr.pod, "pod0")
	if len(ing3) != 1 || len(eg3) != 1 || ing3[0] == ing[0] || eg3[0] == eg[0] {
		t.Errorf("programs after Remove and Attach: ingress %v egress %v; want one each, new (were %v, %v)", ing3, eg3, ing, eg)
	}
	counters(t, progs, "dev0", ebpf.Counters{})
	if err := progs.Remove("dev0"); err != nil {
		t.Fatal(err)
	}
}

func TestAttachFailureLeavesNothing(t *testing.T) {
	pr := newPair(t)
	progs := newPrograms(t)
	err := progs.Attach(context.Background(), "dev0", pr.netns, "nosuch0", ebpf.Policy{})
	if err == nil {
		t.Fatal("Attach to a missing interface succeeded")
	}
	if ing, eg := ebpftest.TCX(t, pr.pod, "pod0"); len(ing)+len(eg) != 0 {
		t.Errorf("programs left: ingress %v egress %v", ing, eg)
	}
	ents, _ := os.ReadDir(filepath.Join(progs.Root(), "dev0"))
	for _, e := range ents {
		if e.Name() == "ingress" || e.Name() == "egress" {
			t.Errorf("pinned link %s left after a failed attach", e.Name())
		}
	}
}
