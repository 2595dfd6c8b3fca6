package link

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/fielderr"
)

const (
	hostMAC = "02:00:00:00:00:01"
	podMAC  = "02:aa:bb:cc:dd:ee"
)

func TestMover_Snapshot(t *testing.T) {
	r := newRig(t)
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1400})
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv1", Peer: "ndp1", MAC: "02:00:00:00:00:02", MTU: 1500, Down: true})

	for _, tc := range []struct {
		name    string
		link    string
		want    *devicev1.LinkSnapshot
		wantErr error
	}{
		{"up", "ndv0", &devicev1.LinkSnapshot{Name: "ndv0", MacAddress: hostMAC, Mtu: 1400, Up: true}, nil},
		{"down", "ndv1", &devicev1.LinkSnapshot{Name: "ndv1", MacAddress: "02:00:00:00:00:02", Mtu: 1500}, nil},
		{"missing", "nope", nil, ErrLinkNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.mover.Snapshot(t.Context(), tc.link)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Snapshot(%s) error = %v, want %v", tc.link, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Snapshot(%s) (-want +got):\n%s", tc.link, diff)
			}
		})
	}
}

// TestMover_AttachDetach runs each case's whole lifecycle: attach, attach
// again, detach, detach again, checking both namespaces after each step.
func TestMover_AttachDetach(t *testing.T) {
	for _, tc := range []struct {
		name string
		up   bool // the host link's state before attach
		cfg  *devicev1.DeviceConfig
		// setup adds links that make names clash: host and pod handles.
		setup   func(t *testing.T, r *rig)
		wantPod view
	}{
		{
			name: "rename, MAC, MTU, addresses and routes",
			up:   true,
			cfg: &devicev1.DeviceConfig{
				PodIfName:  "net1",
				MacAddress: podMAC,
				Mtu:        9000,
				Addresses:  []string{"192.0.2.10/24", "2001:db8::10/64"},
				Routes: []*devicev1.Route{
					{Destination: "10.20.0.0/16", Gateway: "192.0.2.1"},
					{Destination: "2001:db8:1::/48", Gateway: "2001:db8::1"},
					{Destination: "198.51.100.0/24"},
				},
			},
			wantPod: view{
				Name: "net1", MAC: podMAC, MTU: 9000, Up: true,
				Addresses: []string{"192.0.2.10/24", "2001:db8::10/64"},
				Routes:    []string{"10.20.0.0/16 via 192.0.2.1", "198.51.100.0/24", "2001:db8:1::/48 via 2001:db8::1"},
			},
		},
		{
			name:    "empty config keeps name, MAC and MTU",
			up:      true,
			cfg:     &devicev1.DeviceConfig{},
			wantPod: view{Name: "ndv0", MAC: hostMAC, MTU: 1500, Up: true},
		},
		{
			name:    "nil config",
			cfg:     nil,
			wantPod: view{Name: "ndv0", MAC: hostMAC, MTU: 1500, Up: true},
		},
		{
			name: "down host link comes up in the pod with a default route",
			cfg: &devicev1.DeviceConfig{
				PodIfName: "eth1",
				Addresses: []string{"192.0.2.10/24"},
				Routes:    []*devicev1.Route{{Destination: "0.0.0.0/0", Gateway: "192.0.2.1"}},
			},
			wantPod: view{
				Name: "eth1", MAC: hostMAC, MTU: 1500, Up: true,
				Addresses: []string{"192.0.2.10/24"},
				Routes:    []string{"0.0.0.0/0 via 192.0.2.1"},
			},
		},
		{
			name: "pod name taken in the host: renamed in the pod",
			up:   true,
			cfg:  &devicev1.DeviceConfig{PodIfName: "net1", Mtu: 1280},
			setup: func(t *testing.T, r *rig) {
				netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "net1", Peer: "ndq0", MAC: "02:00:00:00:01:01", MTU: 1500})
			},
			wantPod: view{Name: "net1", MAC: hostMAC, MTU: 1280, Up: true},
		},
		{
			name: "both names taken on the far sides: crosses under a temporary name",
			up:   true,
			cfg:  &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.0.2.10/24"}},
			setup: func(t *testing.T, r *rig) {
				netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "net1", Peer: "ndq0", MAC: "02:00:00:00:01:01", MTU: 1500})
				netnstest.AddVeth(t, r.pod, netnstest.Veth{Name: "ndv0", Peer: "ndq1", MAC: "02:00:00:00:01:02", MTU: 1500})
			},
			wantPod: view{Name: "net1", MAC: hostMAC, MTU: 1500, Up: true, Addresses: []string{"192.0.2.10/24"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500, Down: !tc.up})
			if tc.setup != nil {
				tc.setup(t, r)
			}
			ctx := t.Context()
			orig, err := r.mover.Snapshot(ctx, "ndv0")
			if err != nil {
				t.Fatal(err)
			}
			hostBefore := viewOf(t, r.host, "ndv0")
			podName := tc.wantPod.Name

			for _, step := range []string{"attach", "attach again"} {
				if err := r.mover.Attach(ctx, "ndv0", orig, r.podPath, tc.cfg); err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				if diff := cmp.Diff(&tc.wantPod, viewOf(t, r.pod, podName)); diff != "" {
					t.Errorf("%s: pod link (-want +got):\n%s", step, diff)
				}
				if podName != "ndv0" {
					if got := viewOf(t, r.host, "ndv0"); got != nil {
						t.Errorf("%s: ndv0 still in the host: %+v", step, got)
					}
				}
			}
			for _, step := range []string{"detach", "detach again"} {
				if err := r.mover.Detach(ctx, orig, r.podPath, tc.cfg); err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				if diff := cmp.Diff(hostBefore, viewOf(t, r.host, "ndv0")); diff != "" {
					t.Errorf("%s: host link (-want +got):\n%s", step, diff)
				}
				if got := viewOf(t, r.pod, podName); got != nil {
					t.Errorf("%s: %s still in the pod: %+v", step, podName, got)
				}
			}
		})
	}
}

func TestMover_Attach_NameClash(t *testing.T) {
	r := newRig(t)
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
	netnstest.AddVeth(t, r.pod, netnstest.Veth{Name: "net1", Peer: "ndq0", MAC: "02:00:00:00:01:01", MTU: 1500})
	before := viewOf(t, r.host, "ndv0")
	podBefore := viewOf(t, r.pod, "net1")
	orig, err := r.mover.Snapshot(t.Context(), "ndv0")
	if err != nil {
		t.Fatal(err)
	}

	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: podMAC, Mtu: 9000, Addresses: []string{"192.0.2.10/24"}}
	err = r.mover.Attach(t.Context(), "ndv0", orig, r.podPath, cfg)
	if !errors.Is(err, ErrNameClash) {
		t.Fatalf("Attach error = %v, want ErrNameClash", err)
	}
	t.Logf("Attach: %v", err)
	if diff := cmp.Diff(before, viewOf(t, r.host, "ndv0")); diff != "" {
		t.Errorf("host link (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(podBefore, viewOf(t, r.pod, "net1")); diff != "" {
		t.Errorf("pod's own net1 (-want +got):\n%s", diff)
	}
}

// TestMover_Attach_RestoresOnFailure makes Attach fail at each stage and
// checks the host link is back as it was and nothing is left in the pod.
func TestMover_Attach_RestoresOnFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     *devicev1.DeviceConfig
		setup   func(t *testing.T, r *rig)
		ctx     func(t *testing.T) context.Context
		podPath func(r *rig) string
		wantErr error // nil: any error
	}{
		{
			name: "unreachable IPv4 gateway",
			cfg: &devicev1.DeviceConfig{
				PodIfName: "net1", MacAddress: podMAC, Mtu: 9000,
				Addresses: []string{"192.0.2.10/24"},
				Routes:    []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "203.0.113.1"}},
			},
		},
		{
			name: "unreachable IPv6 gateway",
			cfg: &devicev1.DeviceConfig{
				PodIfName: "net1", Mtu: 1400,
				Addresses: []string{"2001:db8::10/64"},
				Routes:    []*devicev1.Route{{Destination: "::/0", Gateway: "2001:db8:ffff::1"}},
			},
		},
		{
			name: "unreachable gateway, pod name taken in the host",
			cfg: &devicev1.DeviceConfig{
				PodIfName: "net1", MacAddress: podMAC,
				Routes: []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "203.0.113.1"}},
			},
			setup: func(t *testing.T, r *rig) {
				netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "net1", Peer: "ndq0", MAC: "02:00:00:00:01:01", MTU: 1500})
			},
		},
		{
			name:    "invalid config",
			cfg:     &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.0.2.10"}},
			wantErr: fielderr.ErrInvalid,
		},
		{
			name: "cancelled context",
			cfg:  &devicev1.DeviceConfig{PodIfName: "net1"},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				return ctx
			},
			wantErr: context.Canceled,
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
			r := newRig(t)
			netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
			if tc.setup != nil {
				tc.setup(t, r)
			}
			before := viewOf(t, r.host, "ndv0")
			orig, err := r.mover.Snapshot(t.Context(), "ndv0")
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if tc.ctx != nil {
				ctx = tc.ctx(t)
			}
			podPath := r.podPath
			if tc.podPath != nil {
				podPath = tc.podPath(r)
			}

			err = r.mover.Attach(ctx, "ndv0", orig, podPath, tc.cfg)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Attach error = %v, want %v", err, cmpOr(tc.wantErr, "an error"))
			}
			t.Logf("Attach: %v", err)
			if diff := cmp.Diff(before, viewOf(t, r.host, "ndv0")); diff != "" {
				t.Errorf("host link (-want +got):\n%s", diff)
			}
			for _, n := range []string{"net1", "ndv0"} {
				if got := viewOf(t, r.pod, n); got != nil {
					t.Errorf("%s left in the pod: %+v", n, got)
				}
			}
		})
	}
}

func cmpOr(err error, s string) any {
	if err != nil {
		return err
	}
	return s
}

func TestMover_Attach_LinkNotFound(t *testing.T) {
	r := newRig(t)
	err := r.mover.Attach(t.Context(), "nope", nil, r.podPath, &devicev1.DeviceConfig{PodIfName: "net1"})
	if !errors.Is(err, ErrLinkNotFound) {
		t.Fatalf("Attach error = %v, want ErrLinkNotFound", err)
	}
}

// TestMover_Detach_NetnsGone detaches from a pod namespace that was deleted
// after the attach, whatever the path has become: done, with ErrLinkLost
// (the veth was destroyed with the namespace).
func TestMover_Detach_NetnsGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		// after deleting the netns, make the path this
		after func(t *testing.T, path string)
	}{
		{"path removed", func(t *testing.T, path string) {}},
		{"path is a plain file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o444); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(path) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
			ctx := t.Context()
			orig, err := r.mover.Snapshot(ctx, "ndv0")
			if err != nil {
				t.Fatal(err)
			}
			cfg := &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.0.2.10/24"}}
			if err := r.mover.Attach(ctx, "ndv0", orig, r.podPath, cfg); err != nil {
				t.Fatal(err)
			}
			if err := deleteNetns(r.podPath); err != nil {
				t.Fatal(err)
			}
			tc.after(t, r.podPath)

			// The veth went with the namespace (its peer too): Detach is
			// done, and says the link is lost.
			if err := r.mover.Detach(ctx, orig, r.podPath, cfg); !errors.Is(err, ErrLinkLost) {
				t.Errorf("Detach after the netns was deleted: %v, want ErrLinkLost", err)
			}
		})
	}
}

func TestMover_Detach_NameClashInHost(t *testing.T) {
	r := newRig(t)
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
	ctx := t.Context()
	orig, err := r.mover.Snapshot(ctx, "ndv0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.0.2.10/24"}}
	if err := r.mover.Attach(ctx, "ndv0", orig, r.podPath, cfg); err != nil {
		t.Fatal(err)
	}
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndq0", MAC: "02:00:00:00:01:01", MTU: 1500}) // takes the name meanwhile
	podBefore := viewOf(t, r.pod, "net1")

	err = r.mover.Detach(ctx, orig, r.podPath, cfg)
	if !errors.Is(err, ErrNameClash) {
		t.Fatalf("Detach error = %v, want ErrNameClash", err)
	}
	if diff := cmp.Diff(podBefore, viewOf(t, r.pod, "net1")); diff != "" {
		t.Errorf("pod link changed (-want +got):\n%s", diff)
	}
}

func TestMover_Detach_InvalidSnapshot(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		name      string
		orig      *devicev1.LinkSnapshot
		wantField string
	}{
		{"nil", nil, "originalLink.name"},
		{"no name", &devicev1.LinkSnapshot{MacAddress: hostMAC}, "originalLink.name"},
		{"bad MAC", &devicev1.LinkSnapshot{Name: "ndv0", MacAddress: "nope"}, "originalLink.macAddress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.mover.Detach(t.Context(), tc.orig, r.podPath, nil)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.wantField {
				t.Fatalf("Detach error = %v, want a FieldError for %s", err, tc.wantField)
			}
		})
	}
}

// deleteNetns removes a named netns as `ip netns del` does.
func deleteNetns(path string) error {
	return netns.DeleteNamed(filepath.Base(path))
}

// TestMover_Attach_AfterMove calls Attach for a link that an earlier Attach
// moved into the pod but did not finish configuring.
func TestMover_Attach_AfterMove(t *testing.T) {
	for _, tc := range []struct {
		name    string
		routes  []*devicev1.Route
		wantErr bool
		wantPod *view // nil: the link is back in the host as it was
	}{
		{
			name:   "finishes the configuration",
			routes: []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "192.0.2.1"}},
			wantPod: &view{
				Name: "net1", MAC: podMAC, MTU: 9000, Up: true,
				Addresses: []string{"192.0.2.10/24"},
				Routes:    []string{"10.0.0.0/8 via 192.0.2.1"},
			},
		},
		{
			name:    "failure restores the original link in the host",
			routes:  []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "203.0.113.1"}},
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, before, orig := rigWithDevice(t)
			cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: podMAC, Mtu: 9000, Addresses: []string{"192.0.2.10/24"}, Routes: tc.routes}
			moveByHand(t, r, cfg)

			err := r.mover.Attach(t.Context(), "ndv0", orig, r.podPath, cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Attach error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantPod, viewOf(t, r.pod, "net1")); diff != "" {
				t.Errorf("pod link (-want +got):\n%s", diff)
			}
			if tc.wantPod == nil {
				if diff := cmp.Diff(before, viewOf(t, r.host, "ndv0")); diff != "" {
					t.Errorf("host link (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// moveByHand does the host half of an Attach of ndv0 as cfg says: down,
// MAC, MTU, rename, move.
func moveByHand(t *testing.T, r *rig, cfg *devicev1.DeviceConfig) {
	t.Helper()
	l, err := r.host.LinkByName("ndv0")
	if err != nil {
		t.Fatal(err)
	}
	mac, err := net.ParseMAC(cfg.GetMacAddress())
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.GetFromPath(r.podPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	for _, step := range []func() error{
		func() error { return r.host.LinkSetDown(l) },
		func() error { return r.host.LinkSetHardwareAddr(l, mac) },
		func() error { return r.host.LinkSetMTU(l, int(cfg.GetMtu())) },
		func() error { return r.host.LinkSetName(l, cfg.GetPodIfName()) },
		func() error { return r.host.LinkSetNsFd(l, int(ns)) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMover_Detach_NetnsGone_LinkReturned detaches a link that the kernel
// already returned to the host when the pod netns died (as it does with a
// physical link): it keeps the pod's name, MAC and MTU until Detach restores
// them.
func TestMover_Detach_NetnsGone_LinkReturned(t *testing.T) {
	r := newRig(t)
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "net1", Peer: "ndp0", MAC: podMAC, MTU: 9000, Down: true}) // as the kernel returns it
	orig := &devicev1.LinkSnapshot{Name: "ndv0", MacAddress: hostMAC, Mtu: 1500, Up: true}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: podMAC, Mtu: 9000}

	if err := r.mover.Detach(t.Context(), orig, r.podPath+"-gone", cfg); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(orig, snapshotOf(t, r.host, "ndv0"), protocmp.Transform()); diff != "" {
		t.Errorf("host link (-want +got):\n%s", diff)
	}
	if got := viewOf(t, r.host, "net1"); got != nil {
		t.Errorf("net1 still in the host: %+v", got)
	}
}

// TestMover_Attach_ConcurrentSameName: pods' devices attached at once, all
// to be called net1 (nri attaches pods concurrently): each crosses under a
// name of its own when another took net1 in the host first, and all land.
func TestMover_Attach_ConcurrentSameName(t *testing.T) {
	r := newRig(t)
	const n = 12
	pods := make([]string, n)
	errs := make(chan error, n)
	for i := range n {
		name := fmt.Sprintf("ndc%d", i)
		netnstest.AddVeth(t, r.host, netnstest.Veth{Name: name, Peer: fmt.Sprintf("ndcp%d", i), MAC: fmt.Sprintf("02:00:00:00:0c:%02x", i), MTU: 1500})
		pods[i] = netnstest.New(t)
	}
	for i := range n {
		go func() {
			dev := fmt.Sprintf("ndc%d", i)
			orig, err := r.mover.Snapshot(t.Context(), dev)
			if err == nil {
				err = r.mover.Attach(t.Context(), dev, orig, pods[i], &devicev1.DeviceConfig{PodIfName: "net1"})
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Attach: %v", err)
		}
	}
	for i, p := range pods {
		if v := viewOf(t, netnstest.Handle(t, p), "net1"); v == nil {
			t.Errorf("pod %d has no net1", i)
		}
	}
}
