//go:build !kernelrig

package link

// A sub-interface held to a share: a macvlan created in the pod with an
// egress rate of 50 Mbit/s sends TCP to a peer namespace behind its parent
// at no more than that (and an unshaped one far faster), measured over
// about 2 s by a Go sender and receiver, with tolerant bounds.

import (
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
)

// inPathNetns runs f on a thread in the network namespace at path; sockets f
// opens stay there.
func inPathNetns(t *testing.T, path string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ns, err := netns.GetFromPath(path)
		if err == nil {
			defer ns.Close()
			err = netns.Set(ns)
		}
		if err == nil {
			err = f()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// shapeWorld is a pod with a macvlan of the host's ndpar0, whose veth
// peer sits in a peer namespace at 192.0.2.1.
type shapeWorld struct {
	*rig
	peerPath string
	sub      *devicev1.SubInterface
}

func newShapeWorld(t *testing.T, rate uint64) *shapeWorld {
	r := newRig(t)
	w := &shapeWorld{rig: r, peerPath: netnstest.New(t), sub: &devicev1.SubInterface{Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN,
		Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_BRIDGE, ParentIfName: "ndpar0", EgressRate: rate}}
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndpar0", Peer: "ndpar0p", MTU: 1500})
	peer := netnstest.Handle(t, w.peerPath)
	p, err := r.host.LinkByName("ndpar0p")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.GetFromPath(w.peerPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := r.host.LinkSetNsFd(p, int(ns)); err != nil {
		t.Fatal(err)
	}
	if p, err = peer.LinkByName("ndpar0p"); err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("192.0.2.1/24")
	if err := peer.AddrAdd(p, addr); err != nil {
		t.Fatal(err)
	}
	if err := peer.LinkSetUp(p); err != nil {
		t.Fatal(err)
	}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.0.2.10/24"}}
	orig := &devicev1.LinkSnapshot{Name: "net1", MacAddress: podMAC, Mtu: 1500}
	if err := r.mover.CreateSub(t.Context(), w.sub, orig, r.podPath, cfg); err != nil {
		t.Fatal(err)
	}
	return w
}

// throughput sends TCP from the pod to the peer for d and returns the
// rate the peer received, in bits per second.
func (w *shapeWorld) throughput(t *testing.T, d time.Duration) float64 {
	var ln net.Listener
	inPathNetns(t, w.peerPath, func() (err error) { ln, err = net.Listen("tcp4", "192.0.2.1:0"); return err })
	defer ln.Close()
	type result struct {
		n       int64
		elapsed time.Duration
		err     error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		n, err := c.Read(buf)
		start := time.Now()
		rest, err2 := io.CopyBuffer(io.Discard, c, buf)
		got <- result{n: int64(n) + rest, elapsed: time.Since(start), err: errors.Join(err, err2)}
	}()
	var conn net.Conn
	inPathNetns(t, w.podPath, func() (err error) {
		conn, err = net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		return err
	})
	chunk := make([]byte, 32<<10)
	for end := time.Now().Add(d); time.Now().Before(end); {
		if _, err := conn.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	return float64(r.n*8) / r.elapsed.Seconds()
}

func TestCreateSub_HeldToItsShare(t *testing.T) {
	const share = 50_000_000
	w := newShapeWorld(t, share)
	qs, err := w.pod.QdiscList(nil)
	if err != nil {
		t.Fatal(err)
	}
	var tb *netlink.Tbf
	for _, q := range qs {
		if q, ok := q.(*netlink.Tbf); ok {
			tb = q
		}
	}
	if tb == nil || tb.Rate != share/8 {
		t.Fatalf("qdiscs in the pod %v: want a tbf at %d bytes/s", qs, share/8)
	}
	rate := w.throughput(t, 2*time.Second)
	t.Logf("a 50 Mbit/s share sent %.1f Mbit/s", rate/1e6)
	if rate > 1.1*share || rate < 0.6*share {
		t.Errorf("a 50 Mbit/s share sent %.1f Mbit/s, want 30..55", rate/1e6)
	}
	// Configured again (CreateSub is idempotent): still one tbf, the rate kept.
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.0.2.10/24"}}
	orig := &devicev1.LinkSnapshot{Name: "net1", MacAddress: podMAC, Mtu: 1500}
	if err := w.mover.CreateSub(t.Context(), w.sub, orig, w.podPath, cfg); err != nil {
		t.Fatal(err)
	}
	if qs, err = w.pod.QdiscList(nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, q := range qs {
		if q, ok := q.(*netlink.Tbf); ok && q.Rate == share/8 {
			n++
		}
	}
	if n != 1 {
		t.Errorf("after CreateSub again: %d tbf qdiscs at the share in %v, want 1", n, qs)
	}
	if err := w.mover.RemoveSub(t.Context(), w.sub, orig, w.podPath, cfg); err != nil {
		t.Fatal(err)
	}
}

// Without a share the same path is far faster: the bound above is the
// token bucket's, not the machine's.
func TestCreateSub_UnshapedIsFaster(t *testing.T) {
	w := newShapeWorld(t, 0)
	rate := w.throughput(t, time.Second)
	t.Logf("unshaped: %.1f Mbit/s", rate/1e6)
	if rate < 150e6 {
		t.Errorf("unshaped macvlan sent %.1f Mbit/s, want well above a 50 Mbit/s share (150 at least)", rate/1e6)
	}
}
