//go:build !kernelrig

package link

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// The DHCP tests run Debian's dnsmasq in a third throwaway namespace, the
// "server" one, on the peer of the device's veth: Attach moves the device
// into the pod, where it asks dnsmasq for its lease.

// dhcpRig is a rig whose device ndv0 is on the network of a DHCP server.
type dhcpRig struct {
	*rig
	srvPath string
	srv     *netlink.Handle
	dir     string // dnsmasq's lease file and log
	dnsmasq *exec.Cmd
	orig    *devicev1.LinkSnapshot
	before  *view
}

// shortDHCP shortens the client's knobs for the test.
func shortDHCP(t *testing.T, timeout, retry, maxLease time.Duration) {
	t.Helper()
	oldT, oldR, oldM := DHCPTimeout, DHCPRetry, DHCPMaxLease
	DHCPTimeout, DHCPRetry, DHCPMaxLease = timeout, retry, maxLease
	t.Cleanup(func() { DHCPTimeout, DHCPRetry, DHCPMaxLease = oldT, oldR, oldM })
}

func newDHCPRig(t *testing.T, opts ...Option) *dhcpRig {
	t.Helper()
	if dnsmasqBin() == "" {
		err := errors.New("not on PATH nor in /usr/sbin")
		if testenv.Strict() {
			t.Fatalf("dnsmasq not found (Debian's dnsmasq-base; make test installs it): %v", err)
		}
		t.Skipf("dnsmasq not found (apt-get install dnsmasq-base): %v", err)
	}
	r := newRig(t)
	if len(opts) > 0 {
		m, err := NewMover(testLogger(t), append([]Option{WithHostNetns(r.hostPath)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		r.mover.Close()
		r.mover = m
	}
	d := &dhcpRig{rig: r, srvPath: netnstest.New(t), dir: t.TempDir()}
	d.srv = netnstest.Handle(t, d.srvPath)
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "nds0", MAC: hostMAC, MTU: 1500})
	peer, err := r.host.LinkByName("nds0")
	if err != nil {
		t.Fatal(err)
	}
	nsFile, err := os.Open(d.srvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer nsFile.Close()
	if err := r.host.LinkSetNsFd(peer, int(nsFile.Fd())); err != nil {
		t.Fatal(err)
	}
	srvLink, err := d.srv.LinkByName("nds0")
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("10.77.0.1/24")
	if err := d.srv.AddrAdd(srvLink, addr); err != nil {
		t.Fatal(err)
	}
	if err := d.srv.LinkSetUp(srvLink); err != nil {
		t.Fatal(err)
	}
	if d.orig, err = r.mover.Snapshot(t.Context(), "ndv0"); err != nil {
		t.Fatal(err)
	}
	d.before = viewOf(t, r.host, "ndv0")
	return d
}

// dnsmasqBin is dnsmasq's path ("" when it is not installed): Debian puts
// it in /usr/sbin, which a test's PATH may lack.
func dnsmasqBin() string {
	if p, err := exec.LookPath("dnsmasq"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/dnsmasq"); err == nil {
		return "/usr/sbin/dnsmasq"
	}
	return ""
}

// startDnsmasq serves leases of 2 minutes (dnsmasq's least) on nds0, with
// a router, an MTU and T1/T2 of 2 and 3 seconds, so that the client renews
// within the test.
func (d *dhcpRig) startDnsmasq(t *testing.T) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+d.srvPath, dnsmasqBin(), "--keep-in-foreground", "--conf-file=/dev/null",
		"--port=0", "--interface=nds0", "--bind-interfaces", "--user=root", "--no-ping", "--log-dhcp",
		"--pid-file="+filepath.Join(d.dir, "pid"), "--log-facility="+filepath.Join(d.dir, "log"),
		"--dhcp-leasefile="+filepath.Join(d.dir, "leases"), "--dhcp-range=10.77.0.50,10.77.0.60,255.255.255.0,2m",
		"--dhcp-option=option:router,10.77.0.1", "--dhcp-option=option:mtu,1400",
		"--dhcp-option=option:T1,2", "--dhcp-option=option:T2,3")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.dnsmasq = cmd
	t.Cleanup(d.stopDnsmasq)
	// dnsmasq listens once it logged that it started.
	waitFor(t, 5*time.Second, "dnsmasq to start", func() bool { return strings.Contains(d.log(), "DHCP, IP range") })
}

func (d *dhcpRig) stopDnsmasq() {
	if d.dnsmasq == nil {
		return
	}
	_ = d.dnsmasq.Process.Signal(unix.SIGTERM)
	_ = d.dnsmasq.Wait()
	d.dnsmasq = nil
}

func (d *dhcpRig) log() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "log"))
	return string(b)
}

// leases is dnsmasq's lease file: one line per lease.
func (d *dhcpRig) leases() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "leases"))
	return strings.TrimSpace(string(b))
}

// acks counts the DHCPACKs dnsmasq sent.
func (d *dhcpRig) acks() int { return strings.Count(d.log(), "DHCPACK(nds0)") }

func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dhcpView is what the lease configured on net1 in the pod: its IPv4
// addresses with whether they have a finite lifetime, its DHCP routes and
// its MTU.
type dhcpView struct {
	Addresses []string
	Routes    []string
	MTU       int
}

func dhcpViewOf(t *testing.T, h *netlink.Handle, name string) *dhcpView {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		return nil
	}
	v := &dhcpView{MTU: l.Attrs().MTU}
	for _, a := range retryDump(t, func() ([]netlink.Addr, error) { return h.AddrList(l, netlink.FAMILY_V4) }) {
		life := "forever"
		if a.ValidLft > 0 && a.ValidLft < 0xffffffff {
			life = "leased"
		}
		v.Addresses = append(v.Addresses, a.IPNet.String()+" "+life)
	}
	for _, r := range retryDump(t, func() ([]netlink.Route, error) { return h.RouteList(l, netlink.FAMILY_V4) }) {
		if r.Protocol != unix.RTPROT_DHCP {
			continue
		}
		v.Routes = append(v.Routes, fmt.Sprintf("%s via %s src %s metric %d", r.Dst, r.Gw, r.Src, r.Priority))
	}
	slices.Sort(v.Addresses)
	return v
}

func dhcpCfg() *devicev1.DeviceConfig { return &devicev1.DeviceConfig{PodIfName: "net1", Dhcp: true} }

// TestDHCPLease: Attach takes the address, default route and MTU from
// dnsmasq; the lease is renewed at T1; Detach releases it (dnsmasq's lease
// file loses it) and the link is back in the host as it was.
func TestDHCPLease(t *testing.T) {
	shortDHCP(t, 5*time.Second, 300*time.Millisecond, 0)
	d := newDHCPRig(t)
	d.startDnsmasq(t)

	start := time.Now()
	if err := d.mover.Attach(t.Context(), "ndv0", d.orig, d.podPath, dhcpCfg()); err != nil {
		t.Fatal(err)
	}
	t.Logf("Attach with DHCP took %s", time.Since(start))
	v := dhcpViewOf(t, d.pod, "net1")
	if v == nil || len(v.Addresses) != 1 || !strings.HasPrefix(v.Addresses[0], "10.77.0.") || !strings.HasSuffix(v.Addresses[0], "/24 leased") {
		t.Fatalf("pod's net1 after Attach: %+v, want one leased 10.77.0.x/24", v)
	}
	ip := strings.TrimSuffix(v.Addresses[0], "/24 leased")
	wantRoute := fmt.Sprintf("0.0.0.0/0 via 10.77.0.1 src %s metric %d", ip, DHCPRouteMetric)
	if !slices.Equal(v.Routes, []string{wantRoute}) || v.MTU != 1400 {
		t.Fatalf("pod's net1 after Attach: routes %q MTU %d, want [%q] and MTU 1400", v.Routes, v.MTU, wantRoute)
	}
	if !strings.Contains(d.leases(), ip) {
		t.Fatalf("dnsmasq's leases %q lack %s", d.leases(), ip)
	}

	// T1 is 2s: the keeper renews, and dnsmasq acknowledges again.
	acks := d.acks()
	waitFor(t, 6*time.Second, "a renewal", func() bool { return d.acks() > acks })
	if got := dhcpViewOf(t, d.pod, "net1"); len(got.Addresses) != 1 || !strings.HasPrefix(got.Addresses[0], ip+"/") {
		t.Fatalf("pod's net1 after the renewal: %+v", got)
	}

	if err := d.mover.Detach(t.Context(), d.orig, d.podPath, dhcpCfg()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the release in dnsmasq's lease file", func() bool { return !strings.Contains(d.leases(), ip) })
	if !strings.Contains(d.log(), "DHCPRELEASE(nds0) "+ip) {
		t.Errorf("dnsmasq logged no release of %s:\n%s", ip, d.log())
	}
	if got := viewOf(t, d.host, "ndv0"); fmt.Sprint(got) != fmt.Sprint(d.before) {
		t.Errorf("host link after Detach: %+v, want %+v", got, d.before)
	}
	if d.mover.keeper("ndv0") != nil {
		t.Error("a lease keeper still runs after Detach")
	}
}

// TestDHCPNoServer: with no server on the network, Attach fails within
// DHCPTimeout naming DHCP and the interface, and the link is back in the
// host as it was.
func TestDHCPNoServer(t *testing.T) {
	shortDHCP(t, 2*time.Second, 300*time.Millisecond, 0)
	d := newDHCPRig(t)
	start := time.Now()
	err := d.mover.Attach(t.Context(), "ndv0", d.orig, d.podPath, dhcpCfg())
	took := time.Since(start)
	if !errors.Is(err, ErrNoLease) || !strings.Contains(err.Error(), "DHCP") || !strings.Contains(err.Error(), "net1") {
		t.Fatalf("Attach with no DHCP server: %v, want ErrNoLease naming DHCP and net1", err)
	}
	t.Logf("error: %v", err)
	if took > DHCPTimeout+2*time.Second {
		t.Errorf("Attach failed after %s, beyond DHCPTimeout %s", took, DHCPTimeout)
	}
	if got := viewOf(t, d.host, "ndv0"); fmt.Sprint(got) != fmt.Sprint(d.before) {
		t.Errorf("host link after the failed Attach: %+v, want %+v", got, d.before)
	}
	if names := netnstest.LinkNames(t, d.pod); !slices.Equal(names, []string{"lo"}) {
		t.Errorf("pod links after the failed Attach: %v", names)
	}
	if d.mover.keeper("ndv0") != nil {
		t.Error("a lease keeper runs after a failed Attach")
	}
}

// TestDHCPLeaseEnds: with the server gone, the address and its route are
// removed when the lease ends; once a server answers again the keeper
// takes a new lease.
func TestDHCPLeaseEnds(t *testing.T) {
	shortDHCP(t, 2*time.Second, 300*time.Millisecond, 4*time.Second)
	d := newDHCPRig(t)
	d.startDnsmasq(t)
	if err := d.mover.Attach(t.Context(), "ndv0", d.orig, d.podPath, dhcpCfg()); err != nil {
		t.Fatal(err)
	}
	if v := dhcpViewOf(t, d.pod, "net1"); len(v.Addresses) != 1 || len(v.Routes) != 1 {
		t.Fatalf("pod's net1 after Attach: %+v", v)
	}
	d.stopDnsmasq()
	gone := time.Now()
	waitFor(t, 8*time.Second, "the address to go with the lease", func() bool {
		v := dhcpViewOf(t, d.pod, "net1")
		return len(v.Addresses) == 0 && len(v.Routes) == 0
	})
	t.Logf("address gone %s after the server", time.Since(gone))

	d.startDnsmasq(t)
	waitFor(t, 8*time.Second, "a new lease once the server is back", func() bool {
		v := dhcpViewOf(t, d.pod, "net1")
		return len(v.Addresses) == 1 && len(v.Routes) == 1
	})
	if err := d.mover.Detach(t.Context(), d.orig, d.podPath, dhcpCfg()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the release", func() bool { return d.leases() == "" })
}

// TestDHCPResume: a provisioner that stops (Close: the lease is not
// released) and starts again picks the lease up from its lease directory,
// renews it, and releases it at Detach.
func TestDHCPResume(t *testing.T) {
	shortDHCP(t, 5*time.Second, 300*time.Millisecond, 0)
	leaseDir := t.TempDir()
	d := newDHCPRig(t, WithLeaseDir(leaseDir))
	d.startDnsmasq(t)
	if err := d.mover.Attach(t.Context(), "ndv0", d.orig, d.podPath, dhcpCfg()); err != nil {
		t.Fatal(err)
	}
	v := dhcpViewOf(t, d.pod, "net1")
	if _, err := os.Stat(filepath.Join(leaseDir, "ndv0.json")); err != nil {
		t.Fatalf("no lease file: %v", err)
	}
	d.mover.Close()
	if d.leases() == "" {
		t.Fatal("Close released the lease")
	}

	restarted, err := NewMover(testLogger(t), WithHostNetns(d.hostPath), WithLeaseDir(leaseDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restarted.Close() })
	if err := restarted.ResumeLease(t.Context(), d.orig, d.podPath, dhcpCfg()); err != nil {
		t.Fatal(err)
	}
	if got := dhcpViewOf(t, d.pod, "net1"); fmt.Sprint(got.Addresses) != fmt.Sprint(v.Addresses) {
		t.Fatalf("pod's net1 after the restart: %+v, want %+v", got, v)
	}
	acks, logged := d.acks(), len(d.log())
	waitFor(t, 6*time.Second, "a renewal by the restarted keeper", func() bool { return d.acks() > acks })
	if since := d.log()[logged:]; strings.Contains(since, "DHCPDISCOVER") {
		t.Errorf("the restarted keeper asked for a new lease instead of renewing:\n%s", since)
	}
	if err := restarted.Detach(t.Context(), d.orig, d.podPath, dhcpCfg()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the release", func() bool { return d.leases() == "" })
	if _, err := os.Stat(filepath.Join(leaseDir, "ndv0.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lease file after Detach: %v", err)
	}
}
