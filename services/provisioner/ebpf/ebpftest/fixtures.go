package ebpftest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/netdra/netdra/shared/testinfra/nodetest"
)

// BPFFS mounts a bpffs of the test's own on a temporary folder, unmounted
// at the end of the test, and returns it: pins of concurrent tests never
// meet.
func BPFFS(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ndbpf")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		os.Remove(dir)
		t.Fatalf("mounting a bpffs: %v", err)
	}
	t.Cleanup(func() {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		_ = os.Remove(dir)
	})
	return dir
}

// TCX returns the IDs of the programs attached with tcx to ifName in the
// namespace ns (ingress, egress).
func TCX(t testing.TB, ns, ifName string) (ingress, egress []ebpf.ProgramID) {
	t.Helper()
	err := In(ns, func() error {
		idx, err := ifindex(ifName)
		if err != nil {
			return err
		}
		for _, q := range []struct {
			at  ebpf.AttachType
			out *[]ebpf.ProgramID
		}{{ebpf.AttachTCXIngress, &ingress}, {ebpf.AttachTCXEgress, &egress}} {
			res, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: q.at})
			if err != nil {
				return err
			}
			for _, p := range res.Programs {
				*q.out = append(*q.out, p.ID)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("querying tcx programs on %s: %v", ifName, err)
	}
	return ingress, egress
}

// AttachTCXRaw attaches prog to ifName in the namespace ns with tcx and no
// link (as `tc` or an agent's BPF_PROG_ATTACH does), at ingress or egress,
// detached at the end of the test if still there; it returns the
// program's ID.
func AttachTCXRaw(t testing.TB, ns, ifName string, prog *ebpf.Program, ingress bool) uint32 {
	t.Helper()
	at := ebpf.AttachTCXEgress
	if ingress {
		at = ebpf.AttachTCXIngress
	}
	err := In(ns, func() error {
		idx, err := ifindex(ifName)
		if err != nil {
			return err
		}
		return link.RawAttachProgram(link.RawAttachProgramOptions{Target: idx, Program: prog, Attach: at})
	})
	if err != nil {
		t.Fatalf("attaching %s to %s: %v", prog, ifName, err)
	}
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return uint32(id)
}

// WaitOperational waits until ifName in the namespace ns is operationally
// up with its queueing discipline in place. `ip link set up` returns
// before the kernel's linkwatch activates the device: until then its qdisc
// is noop, which drops what is sent without an error, and a loaded machine
// can take a second or more to get there. The wait bounds a failing test;
// it measures nothing.
func WaitOperational(t testing.TB, ns, ifName string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := nodetest.IP(t, "-n", ns, "link", "show", "dev", ifName)
		if strings.Contains(out, "state UP") && !strings.Contains(out, "qdisc noop") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s is not operational: %s", ifName, ns, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
