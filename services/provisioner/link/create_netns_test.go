package link

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/link/linktest"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/fielderr"
)

// The host kernel has no dummy module (docs/testing.md, "The kernel
// rig"), so these tests create ifb links, which have a dummy link's shape
// (one end, no lower device); the kernel rig (which has dummy but no ifb)
// runs the same path with dummy links, here when this package runs there
// and in the rig tests of the dummy manager and the server.

// newIfb makes the links of the tests' kind: ifb, or dummy in the rig.
func newIfb(a netlink.LinkAttrs) netlink.Link {
	if inRig {
		return &netlink.Dummy{LinkAttrs: a}
	}
	return &netlink.Ifb{LinkAttrs: a}
}

var inRig = os.Getenv("NETDRA_KERNELRIG") == "1"

// newCreateRig is a rig whose Mover creates links of newIfb's kind.
func newCreateRig(t *testing.T) *rig {
	t.Helper()
	r := newRig(t)
	m, err := NewMover(testLogger(t), WithHostNetns(r.hostPath), WithVirtualKind(newIfb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	r.mover = m
	return r
}

// dummyOrig is what the dummy manager's Setup records for dummy0.
var dummyOrig = &devicev1.LinkSnapshot{Name: "dummy0", MacAddress: "02:00:00:00:00:d0", Mtu: 1500}

// hostLinks lists the names of the links in h.
func hostLinks(t *testing.T, h *netlink.Handle) []string {
	t.Helper()
	var names []string
	for _, l := range retryDump(t, h.LinkList) {
		names = append(names, l.Attrs().Name)
	}
	return names
}

// TestMover_CreateRemove runs a created link's whole lifecycle: create,
// create again, remove, remove again. The host is never touched and no link
// ever moves.
func TestMover_CreateRemove(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     *devicev1.DeviceConfig
		wantPod view
	}{
		{
			name: "name, MAC, MTU, addresses and routes",
			cfg: &devicev1.DeviceConfig{
				PodIfName: "net1", MacAddress: podMAC, Mtu: 9000,
				Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"},
				Routes: []*devicev1.Route{
					{Destination: "10.20.0.0/16", Gateway: "192.0.2.1"},
					{Destination: "198.51.100.0/24"},
				},
			},
			wantPod: view{
				Name: "net1", MAC: podMAC, MTU: 9000, Up: true,
				Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"},
				Routes:    []string{"10.20.0.0/16 via 192.0.2.1", "198.51.100.0/24"},
			},
		},
		{
			name:    "empty config: the prepared name, MAC and MTU",
			cfg:     &devicev1.DeviceConfig{},
			wantPod: view{Name: "dummy0", MAC: dummyOrig.GetMacAddress(), MTU: 1500, Up: true},
		},
		{
			name:    "nil config",
			wantPod: view{Name: "dummy0", MAC: dummyOrig.GetMacAddress(), MTU: 1500, Up: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCreateRig(t)
			hostBefore := hostLinks(t, r.host)
			moves := linktest.CountMoves(t, r.hostPath, r.podPath)
			ctx := t.Context()
			for _, step := range []string{"create", "create again"} {
				if err := r.mover.Create(ctx, dummyOrig, r.podPath, tc.cfg); err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				if diff := cmp.Diff(&tc.wantPod, viewOf(t, r.pod, tc.wantPod.Name)); diff != "" {
					t.Errorf("%s: pod link (-want +got):\n%s", step, diff)
				}
				l, err := r.pod.LinkByName(tc.wantPod.Name)
				if err != nil {
					t.Fatal(err)
				}
				if kind := newIfb(netlink.LinkAttrs{}).Type(); l.Type() != kind || l.Attrs().Alias != CreatedAlias {
					t.Errorf("%s: a %s link with alias %q, want a %s link with alias %q", step, l.Type(), l.Attrs().Alias, kind, CreatedAlias)
				}
			}
			for _, step := range []string{"remove", "remove again"} {
				if err := r.mover.Remove(ctx, dummyOrig, r.podPath, tc.cfg); err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				if got := viewOf(t, r.pod, tc.wantPod.Name); got != nil {
					t.Errorf("%s: %s still in the pod: %+v", step, tc.wantPod.Name, got)
				}
			}
			if diff := cmp.Diff(hostBefore, hostLinks(t, r.host)); diff != "" {
				t.Errorf("host links changed (-before +after):\n%s", diff)
			}
			if out, in := moves.Out(r.hostPath), moves.Out(r.podPath); out != 0 || in != 0 {
				t.Errorf("moves: %d out of the host, %d out of the pod; want none", out, in)
			}
		})
	}
}

// TestMover_Create_NameClash: a pod name held by a link Create did not
// make is refused, and that link is left as it was.
func TestMover_Create_NameClash(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(t *testing.T, r *rig)
	}{
		{"a veth", func(t *testing.T, r *rig) {
			netnstest.AddVeth(t, r.pod, netnstest.Veth{Name: "net1", Peer: "ndq0", MAC: "02:00:00:00:01:01", MTU: 1500})
		}},
		{"an unmarked link of the same kind", func(t *testing.T, r *rig) {
			if err := r.pod.LinkAdd(newIfb(netlink.LinkAttrs{Name: "net1"})); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCreateRig(t)
			tc.add(t, r)
			before := viewOf(t, r.pod, "net1")
			cfg := &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.0.2.10/24"}}
			err := r.mover.Create(t.Context(), dummyOrig, r.podPath, cfg)
			if !errors.Is(err, ErrNameClash) {
				t.Fatalf("Create() = %v, want ErrNameClash", err)
			}
			t.Log(err)
			if diff := cmp.Diff(before, viewOf(t, r.pod, "net1")); diff != "" {
				t.Errorf("the other link changed (-before +after):\n%s", diff)
			}
			// Remove leaves it too.
			if err := r.mover.Remove(t.Context(), dummyOrig, r.podPath, cfg); err != nil {
				t.Fatalf("Remove() = %v", err)
			}
			if diff := cmp.Diff(before, viewOf(t, r.pod, "net1")); diff != "" {
				t.Errorf("Remove changed the other link (-before +after):\n%s", diff)
			}
		})
	}
}

// TestMover_Create_DeletesOnFailure: a Create that fails leaves no link in
// the pod, and the host untouched.
func TestMover_Create_DeletesOnFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     *devicev1.DeviceConfig
		podPath func(r *rig) string
		orig    *devicev1.LinkSnapshot
		wantErr error // nil: any error
	}{
		{
			name: "unreachable IPv4 gateway",
			cfg: &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: podMAC, Mtu: 9000,
				Addresses: []string{"192.0.2.10/24"},
				Routes:    []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "203.0.113.1"}}},
		},
		{
			name: "unreachable IPv6 gateway",
			cfg: &devicev1.DeviceConfig{PodIfName: "net1",
				Addresses: []string{"2001:db8::10/64"},
				Routes:    []*devicev1.Route{{Destination: "::/0", Gateway: "2001:db8:ffff::1"}}},
		},
		{
			name:    "invalid config",
			cfg:     &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.0.2.10"}},
			wantErr: fielderr.ErrInvalid,
		},
		{
			name:    "no name",
			cfg:     &devicev1.DeviceConfig{PodIfName: "net1"},
			orig:    &devicev1.LinkSnapshot{},
			wantErr: fielderr.ErrInvalid,
		},
		{
			name:    "pod netns missing",
			cfg:     &devicev1.DeviceConfig{PodIfName: "net1"},
			podPath: func(r *rig) string { return r.podPath + "-missing" },
			wantErr: os.ErrNotExist,
		},
		{
			name:    "pod netns is the host netns",
			cfg:     &devicev1.DeviceConfig{PodIfName: "net1"},
			podPath: func(r *rig) string { return r.hostPath },
			wantErr: ErrHostNetns,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCreateRig(t)
			hostBefore := hostLinks(t, r.host)
			podBefore := hostLinks(t, r.pod)
			podPath, orig := r.podPath, dummyOrig
			if tc.podPath != nil {
				podPath = tc.podPath(r)
			}
			if tc.orig != nil {
				orig = tc.orig
			}
			err := r.mover.Create(t.Context(), orig, podPath, tc.cfg)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Create() = %v, want %v", err, cmpOr(tc.wantErr, "an error"))
			}
			t.Log(err)
			if diff := cmp.Diff(podBefore, hostLinks(t, r.pod)); diff != "" {
				t.Errorf("pod links (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(hostBefore, hostLinks(t, r.host)); diff != "" {
				t.Errorf("host links (-before +after):\n%s", diff)
			}
		})
	}
}

// TestMover_Remove_NetnsGone: the kernel deletes a virtual link with its
// namespace, so Remove for a namespace that is gone is success.
func TestMover_Remove_NetnsGone(t *testing.T) {
	r := newCreateRig(t)
	cfg := &devicev1.DeviceConfig{PodIfName: "net1"}
	if err := r.mover.Create(t.Context(), dummyOrig, r.podPath, cfg); err != nil {
		t.Fatal(err)
	}
	if err := deleteNetns(r.podPath); err != nil {
		t.Fatal(err)
	}
	if err := r.mover.Remove(t.Context(), dummyOrig, r.podPath, cfg); err != nil {
		t.Fatalf("Remove() = %v after the netns went, want nil", err)
	}
	for _, n := range []string{"net1", "dummy0"} {
		if got := viewOf(t, r.host, n); got != nil {
			t.Errorf("%s in the host: %+v", n, got)
		}
	}
}

// TestMover_Moves_AttachDetach counts the namespace moves of a host link's
// lifecycle as the kernel reports them: exactly one into the pod and one
// back, also when attach and detach are repeated and when the pod name is
// taken in the host and the host name in the pod (no temporary-name dance
// that moves twice).
func TestMover_Moves_AttachDetach(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, r *rig)
	}{
		{"names free", nil},
		{"both names taken on the far sides", func(t *testing.T, r *rig) {
			netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "net1", Peer: "ndq0", MAC: "02:00:00:00:01:01", MTU: 1500})
			netnstest.AddVeth(t, r.pod, netnstest.Veth{Name: "ndv0", Peer: "ndq1", MAC: "02:00:00:00:01:02", MTU: 1500})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
			if tc.setup != nil {
				tc.setup(t, r)
			}
			ctx := t.Context()
			orig, err := r.mover.Snapshot(ctx, "ndv0")
			if err != nil {
				t.Fatal(err)
			}
			cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: podMAC, Mtu: 9000,
				Addresses: []string{"192.0.2.10/24"}, Routes: []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "192.0.2.1"}}}
			moves := linktest.CountMoves(t, r.hostPath, r.podPath)
			for range 2 {
				if err := r.mover.Attach(ctx, "ndv0", orig, r.podPath, cfg); err != nil {
					t.Fatal(err)
				}
			}
			if in, out := moves.Out(r.hostPath), moves.Out(r.podPath); in != 1 || out != 0 {
				t.Errorf("after attach: %d moves into the pod, %d out; want 1, 0", in, out)
			}
			for range 2 {
				if err := r.mover.Detach(ctx, orig, r.podPath, cfg); err != nil {
					t.Fatal(err)
				}
			}
			if in, out := moves.Out(r.hostPath), moves.Out(r.podPath); in != 1 || out != 1 {
				t.Errorf("after detach: %d moves into the pod, %d out; want 1, 1", in, out)
			}
		})
	}
}
