package link

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/shared/fielderr"
)

// DHCP for a claim's dhcp: the interface in the pod takes its IPv4
// address, routes and MTU from a DHCP server on its network, and keeps the
// lease while it is in the pod.
//
// The provisioner runs the client, one lease keeper (a goroutine) per
// device: a DHCP client needs a packet socket bound to the interface
// inside the pod's namespace, and the provisioner is the one process that
// enters pod namespaces (nri and dra never do, and the pod's own
// containers are not ours to run a client in). The socket is made on a
// thread switched into the namespace that then exits (inNetns), and used
// from any thread afterwards. Each exchange (acquire, renew, rebind,
// release) opens its own socket and closes it: a packet socket open for a
// lease's lifetime would get a copy of every IPv4 frame of the interface.
//
// The address is added with the lease's remaining time as its lifetime,
// so the kernel removes it, with the routes through it, when the lease
// ends unrenewed, whether or not the provisioner is running. The keeper
// renews at T1 (to the server) and rebinds at T2 (broadcast); at the end
// of the lease, or on a NAK, it removes what the lease configured and asks
// for a new lease until one comes. Detach stops the keeper, releases the
// lease and removes the address before the link leaves the pod. Close
// stops the keepers without releasing: with a lease directory
// (WithLeaseDir) each lease is on disk, and a restarted provisioner picks
// it up again (ResumeLease).

// Knobs of the DHCP client: package variables so that tests can shorten
// them; nothing else sets them.
var (
	// DHCPTimeout bounds Attach's wait for a lease (DISCOVER to ACK) and
	// each exchange of a lease keeper.
	DHCPTimeout = 10 * time.Second
	// DHCPRetry is the least wait of a lease keeper between two tries:
	// to get a lease once it has none, or to renew before T2 and rebind
	// before the lease ends.
	DHCPRetry = 30 * time.Second
	// DHCPMaxLease caps the lease time the client takes (0: the
	// server's): a client may use less of a lease than it is given.
	// Tests set it to see a lease end in seconds.
	DHCPMaxLease time.Duration
)

// DHCPRouteMetric is the metric of the routes a lease adds: after the
// pod's own default route (its primary network's, metric 0), so that a
// second network's router does not take the pod's traffic over.
const DHCPRouteMetric = 1024

// dhcpFirstTry is how long one DHCP message waits for its answer before
// it is sent again (the wait doubles each time) within the exchange's
// bound.
const dhcpFirstTry = time.Second

// Lease is a DHCP lease as a lease keeper holds it and persists it (in
// the lease directory, as JSON): the server's OFFER and ACK as sent, and
// when the ACK came.
type Lease struct {
	Offer    []byte    `json:"offer"`
	ACK      []byte    `json:"ack"`
	Obtained time.Time `json:"obtained"`
}

// leaseInfo is what a lease gives the interface.
type leaseInfo struct {
	addr   netip.Prefix
	routes []leaseRoute
	mtu    int
	server net.IP
	// t1, t2 and end are when to renew, rebind and give up the lease;
	// zero end: an infinite lease.
	t1, t2, end time.Time
}

type leaseRoute struct {
	dst netip.Prefix
	gw  netip.Addr // invalid: on the link
}

func newLease(l *nclient4.Lease) *Lease {
	return &Lease{Offer: l.Offer.ToBytes(), ACK: l.ACK.ToBytes(), Obtained: l.CreationTime}
}

// client is l as the DHCP library takes it.
func (l *Lease) client() (*nclient4.Lease, error) {
	offer, err := dhcpv4.FromBytes(l.Offer)
	if err != nil {
		return nil, fmt.Errorf("the lease's offer: %w", err)
	}
	ack, err := dhcpv4.FromBytes(l.ACK)
	if err != nil {
		return nil, fmt.Errorf("the lease's ACK: %w", err)
	}
	return &nclient4.Lease{Offer: offer, ACK: ack, CreationTime: l.Obtained}, nil
}

// info parses what the lease gives: its address (with the subnet mask,
// the address class's without one), its routes (the classless static
// routes when there are, else a default route through the first router),
// its MTU (0: none), and its times (T1 and T2 as the server says, half
// and seven eighths of the lease without; capped by DHCPMaxLease).
func (l *Lease) info() (leaseInfo, error) {
	c, err := l.client()
	if err != nil {
		return leaseInfo{}, err
	}
	ack := c.ACK
	ip, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if !ok || !ip.IsGlobalUnicast() {
		return leaseInfo{}, fmt.Errorf("the DHCP server gave no usable address (%v)", ack.YourIPAddr)
	}
	mask := ack.SubnetMask()
	if mask == nil {
		mask = ack.YourIPAddr.DefaultMask()
	}
	ones, bits := mask.Size()
	if bits != 32 {
		return leaseInfo{}, fmt.Errorf("the DHCP server gave a bad subnet mask %v", mask)
	}
	li := leaseInfo{addr: netip.PrefixFrom(ip, ones), server: c.Offer.ServerIdentifier()}
	if r := ack.ClasslessStaticRoute(); len(r) > 0 {
		for _, rt := range r {
			dst, err := netip.ParsePrefix(rt.Dest.String())
			if err != nil {
				continue
			}
			gw, _ := netip.AddrFromSlice(rt.Router.To4())
			if gw.IsUnspecified() {
				gw = netip.Addr{}
			}
			li.routes = append(li.routes, leaseRoute{dst: dst.Masked(), gw: gw})
		}
	} else if routers := ack.Router(); len(routers) > 0 {
		if gw, ok := netip.AddrFromSlice(routers[0].To4()); ok && gw.IsGlobalUnicast() {
			li.routes = append(li.routes, leaseRoute{dst: netip.MustParsePrefix("0.0.0.0/0"), gw: gw})
		}
	}
	if b := ack.Options.Get(dhcpv4.OptionInterfaceMTU); len(b) == 2 {
		if mtu := int(binary.BigEndian.Uint16(b)); mtu >= minMTU {
			li.mtu = mtu
		}
	}
	life := ack.IPAddressLeaseTime(0)
	if life <= 0 {
		return leaseInfo{}, errors.New("the DHCP server gave no lease time")
	}
	if life >= math.MaxUint32*time.Second {
		return li, nil // infinite
	}
	t1 := ack.IPAddressRenewalTime(life / 2)
	t2 := ack.IPAddressRebindingTime(life * 7 / 8)
	if DHCPMaxLease > 0 && life > DHCPMaxLease {
		life = DHCPMaxLease
	}
	if t2 <= 0 || t2 >= life {
		t2 = life * 7 / 8
	}
	if t1 <= 0 || t1 > t2 {
		t1 = t2 * 4 / 7
	}
	li.t1, li.t2, li.end = l.Obtained.Add(t1), l.Obtained.Add(t2), l.Obtained.Add(life)
	return li, nil
}

// dhcpModifiers are what every message asks of the server.
var dhcpModifiers = []dhcpv4.Modifier{dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter,
	dhcpv4.OptionInterfaceMTU, dhcpv4.OptionClasslessStaticRoute)}

// dhcpClient opens a DHCP client on the interface ifName of the namespace
// ns: its packet socket is made on a thread switched into ns. Its
// messages go to server (nil: broadcast) from src, the leased address
// (nil: none yet, 0.0.0.0), and it takes the answers to src. A message
// from 0.0.0.0 to a unicast address is a martian the server's kernel
// drops, so a renewal and a release need src. Close it after the
// exchange.
func dhcpClient(ns netns.NsHandle, ifName string, server, src net.IP) (*nclient4.Client, error) {
	var conn net.PacketConn
	var hw net.HardwareAddr
	err := inNetns(ns, func() error {
		ifc, err := net.InterfaceByName(ifName)
		if err != nil {
			return err
		}
		hw = ifc.HardwareAddr
		raw, err := packet.Listen(ifc, packet.Datagram, unix.ETH_P_IP, nil)
		if err != nil {
			return err
		}
		conn = nclient4.NewBroadcastUDPConn(raw, &net.UDPAddr{IP: src, Port: nclient4.ClientPort})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("opening a DHCP socket on %s: %w", ifName, err)
	}
	opts := []nclient4.ClientOpt{nclient4.WithTimeout(dhcpFirstTry), nclient4.WithRetry(-1)} // the context bounds it
	if server != nil {
		opts = append(opts, nclient4.WithServerAddr(&net.UDPAddr{IP: server, Port: nclient4.ServerPort}))
	}
	c, err := nclient4.NewWithConn(conn, hw, opts...)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("opening a DHCP client on %s: %w", ifName, err)
	}
	return c, nil
}

// acquireLease gets a lease for the interface ifName of ns (DISCOVER,
// OFFER, REQUEST, ACK) within DHCPTimeout. No answer in time is
// ErrNoLease.
func acquireLease(ctx context.Context, ns netns.NsHandle, ifName string) (*Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, DHCPTimeout)
	defer cancel()
	c, err := dhcpClient(ns, ifName, nil, nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	l, err := c.Request(ctx, dhcpModifiers...)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nclient4.ErrNoResponse) {
			return nil, fmt.Errorf("no DHCP server answered on %s within %s: %w", ifName, DHCPTimeout, ErrNoLease)
		}
		return nil, fmt.Errorf("DHCP on %s: %w", ifName, err)
	}
	lease := newLease(l)
	if _, err := lease.info(); err != nil {
		return nil, fmt.Errorf("DHCP on %s: %w", ifName, err)
	}
	return lease, nil
}

// extendLease renews (to server) or rebinds (server nil: broadcast) lease
// within timeout. A NAK is *nclient4.ErrNak.
func extendLease(ns netns.NsHandle, ifName string, lease *Lease, server net.IP, timeout time.Duration) (*Lease, error) {
	cl, err := lease.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := dhcpClient(ns, ifName, server, cl.ACK.YourIPAddr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	l, err := c.Renew(ctx, cl, dhcpModifiers...)
	if err != nil {
		return nil, err
	}
	return newLease(l), nil
}

// releaseLease tells the server the lease is no longer used (a RELEASE
// has no answer).
func releaseLease(ns netns.NsHandle, ifName string, lease *Lease) error {
	cl, err := lease.client()
	if err != nil {
		return err
	}
	c, err := dhcpClient(ns, ifName, nil, cl.ACK.YourIPAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Release(cl); err != nil {
		return fmt.Errorf("releasing the DHCP lease of %s: %w", ifName, err)
	}
	return nil
}

// applyLease configures what li gives on l in c: the MTU (unless the
// claim sets one: mtu), the address with the lease's remaining time as its
// lifetime, and the routes from it (in table, the VRF's or 0). Existing
// ones are replaced, so a renewal only extends the lifetime.
func (c *conn) applyLease(l netlink.Link, li leaseInfo, mtu, table int) error {
	a := l.Attrs()
	if mtu == 0 && li.mtu != 0 && a.MTU != li.mtu {
		if err := c.h.LinkSetMTU(l, li.mtu); err != nil {
			return fmt.Errorf("setting MTU of %s to %d (DHCP) in %s: %w", a.Name, li.mtu, c.name, err)
		}
		a.MTU = li.mtu
	}
	addr := &netlink.Addr{IPNet: ipNet(li.addr.Addr(), li.addr.Bits())}
	if !li.end.IsZero() {
		left := int(time.Until(li.end) / time.Second)
		if left < 1 {
			return fmt.Errorf("the DHCP lease of %s on %s has ended", li.addr, a.Name)
		}
		addr.ValidLft, addr.PreferedLft = left, left
	}
	if err := c.h.AddrReplace(l, addr); err != nil {
		return fmt.Errorf("adding address %s (DHCP) to %s in %s: %w", li.addr, a.Name, c.name, err)
	}
	for _, r := range leaseRoutes(a.Index, li, table) {
		if err := c.h.RouteReplace(r); err != nil {
			return fmt.Errorf("adding route %s via %s (DHCP) dev %s in %s: %w", r.Dst, r.Gw, a.Name, c.name, err)
		}
	}
	return nil
}

func leaseRoutes(index int, li leaseInfo, table int) []*netlink.Route {
	var out []*netlink.Route
	for _, lr := range li.routes {
		r := &netlink.Route{LinkIndex: index, Dst: ipNet(lr.dst.Addr(), lr.dst.Bits()), Src: net.IP(li.addr.Addr().AsSlice()),
			Protocol: unix.RTPROT_DHCP, Priority: DHCPRouteMetric, Table: table}
		if lr.gw.IsValid() {
			r.Gw = net.IP(lr.gw.AsSlice())
		} else {
			r.Scope = netlink.SCOPE_LINK
		}
		out = append(out, r)
	}
	return out
}

// unapplyLease removes from l what applyLease added but the MTU: the
// address and the routes through it. What is gone already is fine.
func (c *conn) unapplyLease(l netlink.Link, li leaseInfo, table int) error {
	var errs []error
	for _, r := range leaseRoutes(l.Attrs().Index, li, table) {
		if err := c.h.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("deleting route %s (DHCP) in %s: %w", r.Dst, c.name, err))
		}
	}
	addr := &netlink.Addr{IPNet: ipNet(li.addr.Addr(), li.addr.Bits())}
	if err := c.h.AddrDel(l, addr); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("deleting address %s (DHCP) of %s in %s: %w", li.addr, l.Attrs().Name, c.name, err))
	}
	return errors.Join(errs...)
}

// dhcpJob is the DHCP step of one Attach: configure takes a lease (or
// finds the keeper's) and the Attach starts a keeper with it.
type dhcpJob struct {
	m     *Mover
	key   string
	lease *Lease // taken by this Attach; nil: none, or the keeper's
}

// run is configure's DHCP step on l, up in pod: the running keeper's
// lease of this device configured again (an Attach called again), or a
// new lease, configured.
func (j *dhcpJob) run(ctx context.Context, pod *conn, l netlink.Link, want config) error {
	if j.m == nil {
		return fielderr.New("dhcp", "not for a link created in the pod")
	}
	if k := j.m.keeper(j.key); k != nil && k.podName == l.Attrs().Name && k.sameNetns(pod.ns) {
		if lease := k.current(); lease != nil {
			li, err := lease.info()
			if err == nil {
				err = pod.applyLease(l, li, want.mtu, want.table())
			}
			return err
		}
	}
	lease, err := acquireLease(ctx, pod.ns, l.Attrs().Name)
	if err != nil {
		return fmt.Errorf("DHCP on %s in %s: %w", l.Attrs().Name, pod.name, err)
	}
	li, _ := lease.info() // acquireLease parsed it
	if err := pod.applyLease(l, li, want.mtu, want.table()); err != nil {
		return errors.Join(err, j.undo(pod, l.Attrs().Name, lease, want))
	}
	j.lease = lease
	return nil
}

// undo releases lease, taken by a failed Attach, and removes what it
// configured on the link ifName in pod.
func (j *dhcpJob) undo(pod *conn, ifName string, lease *Lease, want config) error {
	if lease == nil {
		return nil
	}
	err := releaseLease(pod.ns, ifName, lease)
	if l, lerr := pod.lookup(ifName); lerr == nil && l != nil {
		if li, ierr := lease.info(); ierr == nil {
			err = errors.Join(err, pod.unapplyLease(l, li, want.table()))
		}
	}
	return err
}

// table is the routing table of the claim's routes: its VRF's, or 0.
func (c config) table() int {
	if c.vrf != nil {
		return int(c.vrf.GetTable())
	}
	return 0
}

// WithLeaseDir makes the lease keepers write each lease they hold to
// <dir>/<host interface name>.json (removed when the lease is released),
// so that a restarted provisioner picks it up again (ResumeLease). dir
// must survive a restart of the provisioner but not of the node (a tmpfs
// such as /run): a lease file names a pod netns that a reboot ends.
func WithLeaseDir(dir string) Option {
	return func(m *Mover) error {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("lease directory: %w", err)
		}
		m.leaseDir = dir
		return nil
	}
}

func (m *Mover) leasePath(key string) string { return filepath.Join(m.leaseDir, key+".json") }

// saveLease writes key's lease to the lease directory (nil: removes it).
func (m *Mover) saveLease(key string, lease *Lease) error {
	if m.leaseDir == "" {
		return nil
	}
	if lease == nil {
		if err := os.Remove(m.leasePath(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the DHCP lease of %s: %w", key, err)
		}
		return nil
	}
	data, err := json.Marshal(lease)
	if err == nil {
		err = WriteFileAtomic(m.leasePath(key), data)
	}
	if err != nil {
		return fmt.Errorf("saving the DHCP lease of %s: %w", key, err)
	}
	return nil
}

// loadLease reads key's lease from the lease directory; nil when there is
// none.
func (m *Mover) loadLease(key string) (*Lease, error) {
	if m.leaseDir == "" {
		return nil, nil
	}
	data, err := os.ReadFile(m.leasePath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the DHCP lease of %s: %w", key, err)
	}
	var l Lease
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("reading the DHCP lease of %s: %w", key, err)
	}
	if _, err := l.info(); err != nil {
		return nil, fmt.Errorf("reading the DHCP lease of %s: %w", key, err)
	}
	return &l, nil
}

// WriteFileAtomic writes data to path (mode 0600) through a synced
// temporary file and a rename: path holds the old data or the new, never a
// part. The provisioner's records (leases here, netns pins in server) are
// written with it.
func WriteFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// leaseKeeper keeps one device's lease on its interface in a pod: see
// the package's DHCP comment above.
type leaseKeeper struct {
	m       *Mover
	log     *slog.Logger
	key     string
	ns      netns.NsHandle // owned: closed when the keeper ends
	nsName  string
	podName string
	mtu     int // the claim's (0: the lease's)
	table   int
	stop    chan struct{}
	done    chan struct{}

	mu    sync.Mutex
	lease *Lease // nil while it has none
}

func (m *Mover) keeper(key string) *leaseKeeper {
	m.leasesMu.Lock()
	defer m.leasesMu.Unlock()
	return m.leases[key]
}

func (k *leaseKeeper) current() *Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

func (k *leaseKeeper) sameNetns(ns netns.NsHandle) bool { return k.ns.Equal(ns) }

// keep starts the lease keeper of key on the interface podName of the
// namespace at netnsPath, holding lease (nil: it asks for one first). An
// older keeper of key is stopped first, its lease not released.
func (m *Mover) keep(key, netnsPath, podName string, lease *Lease, want config) error {
	ns, err := netlinkns.Open(netnsPath)
	if err != nil {
		return fmt.Errorf("keeping the DHCP lease of %s: %w", podName, err)
	}
	k := &leaseKeeper{m: m, log: m.log.With("link", key, "podIfName", podName, "netns", netnsPath), key: key, ns: ns, nsName: netnsPath,
		podName: podName, mtu: want.mtu, table: want.table(), stop: make(chan struct{}), done: make(chan struct{}), lease: lease}
	m.leasesMu.Lock()
	old := m.leases[key]
	if m.leases == nil {
		m.leases = map[string]*leaseKeeper{}
	}
	m.leases[key] = k
	m.leasesMu.Unlock()
	if old != nil && old != k {
		old.halt()
	}
	if err := m.saveLease(key, lease); err != nil {
		k.log.Warn("DHCP lease not saved: a restarted provisioner asks for a new one", "error", err)
	}
	go k.run()
	return nil
}

// halt stops k and waits for it.
func (k *leaseKeeper) halt() {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	<-k.done
}

// dropLease stops key's keeper, releases its lease (or the one in the
// lease directory, when no keeper runs: the provisioner restarted) and
// removes the address from the interface podName in pod. Nothing when
// there is no lease.
func (m *Mover) dropLease(key string, pod *conn, podName string, want config) error {
	m.leasesMu.Lock()
	k := m.leases[key]
	delete(m.leases, key)
	m.leasesMu.Unlock()
	var lease *Lease
	if k != nil {
		k.halt()
		lease = k.current()
	} else {
		var err error
		if lease, err = m.loadLease(key); err != nil {
			m.log.Warn("DHCP lease not released: its file is unreadable; the server frees it when it ends", "link", key, "error", err)
		}
	}
	if lease != nil && pod != nil {
		if l, err := pod.lookup(podName); err == nil && l != nil {
			if err := releaseLease(pod.ns, podName, lease); err != nil {
				m.log.Warn("DHCP lease not released; the server frees it when it ends", "link", key, "error", err)
			}
			if li, err := lease.info(); err == nil {
				if err := pod.unapplyLease(l, li, want.table()); err != nil {
					return err
				}
			}
		}
	}
	return m.saveLease(key, nil)
}

// ResumeLease starts keeping the DHCP lease of a device that an earlier
// run of the provisioner attached to the pod namespace at netnsPath with
// cfg (its link in the pod as cfg.PodIfName, else orig.Name): with the
// lease from the lease directory when there is one (its address
// configured again while the lease lasts; one that ended meanwhile is
// dropped and a new one asked for), else asking for a new one. Nothing
// without cfg.Dhcp, or when a keeper of the device runs. A link that is
// not in the pod is ErrLinkNotFound.
func (m *Mover) ResumeLease(ctx context.Context, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error {
	if !cfg.GetDhcp() || orig.GetName() == "" {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	key := orig.GetName()
	if m.keeper(key) != nil {
		return nil
	}
	want, err := parseConfig(cfg)
	if err != nil {
		return err
	}
	lease, err := m.loadLease(key)
	if err != nil {
		m.log.Warn("DHCP lease not picked up again: asking for a new one", "link", key, "error", err)
	}
	podName := cmp.Or(cfg.GetPodIfName(), key)
	pod, err := m.dialPod(netnsPath)
	if err != nil {
		return err
	}
	defer pod.Close()
	l, err := pod.link(podName)
	if err != nil {
		return err
	}
	if lease != nil {
		if li, err := lease.info(); err == nil && time.Now().Before(li.end) {
			if err := pod.applyLease(l, li, want.mtu, want.table()); err != nil {
				m.log.Warn("DHCP lease picked up again but not configured", "link", key, "error", err)
			}
		}
	}
	m.log.Info("DHCP lease picked up again", "link", key, "podIfName", podName, "netns", netnsPath, "fromFile", lease != nil)
	return m.keep(key, netnsPath, podName, lease, want)
}

// stopLeases stops every keeper without releasing its lease (Close).
func (m *Mover) stopLeases() {
	m.leasesMu.Lock()
	ks := m.leases
	m.leases = nil
	m.leasesMu.Unlock()
	for _, k := range ks {
		k.halt()
	}
}

// wait waits d, false when the keeper is stopped meanwhile.
func (k *leaseKeeper) wait(d time.Duration) bool {
	if d <= 0 {
		d = 0
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-k.stop:
		return false
	}
}

// run keeps the lease until stopped: renewing from T1 (to the server),
// rebinding from T2 (broadcast), and at its end or on a NAK, removing what
// it configured and asking for a new lease until one comes.
func (k *leaseKeeper) run() {
	defer close(k.done)
	defer k.ns.Close()
	for {
		select {
		case <-k.stop:
			return
		default:
		}
		if err := k.withLink(func(*conn, netlink.Link) error { return nil }); errors.Is(err, ErrLinkNotFound) {
			k.log.Warn("DHCP lease keeper stops: the link is gone from the pod", "error", err)
			return
		}
		lease := k.current()
		if lease == nil {
			if !k.acquire() {
				return
			}
			continue
		}
		li, err := lease.info()
		if err != nil || li.end.IsZero() {
			if err != nil {
				k.log.Error("DHCP lease unusable; asking for a new one", "error", err)
				k.set(nil, nil)
				continue
			}
			<-k.stop // an infinite lease
			return
		}
		now := time.Now()
		var server net.IP
		var until time.Time
		switch {
		case !now.Before(li.end):
			k.log.Warn("DHCP lease ended unrenewed: address removed", "address", li.addr)
			k.set(nil, &li)
			continue
		case now.Before(li.t1):
			if !k.wait(time.Until(li.t1)) {
				return
			}
			continue
		case now.Before(li.t2):
			server, until = li.server, li.t2
		default:
			until = li.end
		}
		next, err := extendLease(k.ns, k.podName, lease, server, min(DHCPTimeout, time.Until(until)))
		var nak *nclient4.ErrNak
		switch {
		case err == nil:
			if err := k.configure(next); err != nil {
				k.log.Error("DHCP lease renewed but not configured", "error", err)
			}
			k.log.Debug("DHCP lease renewed", "address", li.addr, "rebind", server == nil)
		case errors.As(err, &nak):
			k.log.Warn("DHCP server refused the lease's renewal: address removed", "address", li.addr, "error", err)
			k.set(nil, &li)
		default:
			k.log.Debug("DHCP lease not renewed yet", "error", err, "rebind", server == nil)
			if !k.wait(min(max(time.Until(until)/2, DHCPRetry), time.Until(until))) {
				return
			}
		}
	}
}

// acquire asks for a new lease and configures it, or waits DHCPRetry;
// false when stopped.
func (k *leaseKeeper) acquire() bool {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-k.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	lease, err := acquireLease(ctx, k.ns, k.podName)
	cancel()
	if err == nil {
		err = k.configure(lease)
		if err == nil {
			li, _ := lease.info()
			k.log.Info("DHCP lease taken again", "address", li.addr)
			return true
		}
	}
	k.log.Debug("no DHCP lease yet", "error", err)
	return k.wait(DHCPRetry)
}

// configure applies lease on the keeper's link and holds it.
func (k *leaseKeeper) configure(lease *Lease) error {
	li, err := lease.info()
	if err != nil {
		return err
	}
	err = k.withLink(func(c *conn, l netlink.Link) error { return c.applyLease(l, li, k.mtu, k.table) })
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.lease = lease
	k.mu.Unlock()
	if err := k.m.saveLease(k.key, lease); err != nil {
		k.log.Warn("DHCP lease not saved: a restarted provisioner asks for a new one", "error", err)
	}
	return nil
}

// set drops the held lease for next (nil: none), removing what the old
// one (old) configured.
func (k *leaseKeeper) set(next *Lease, old *leaseInfo) {
	if old != nil {
		if err := k.withLink(func(c *conn, l netlink.Link) error { return c.unapplyLease(l, *old, k.table) }); err != nil {
			k.log.Warn("removing what the ended DHCP lease configured", "error", err)
		}
	}
	k.mu.Lock()
	k.lease = next
	k.mu.Unlock()
	if err := k.m.saveLease(k.key, next); err != nil {
		k.log.Warn("DHCP lease file", "error", err)
	}
}

// withLink runs f with a connection to the keeper's namespace and its
// link.
func (k *leaseKeeper) withLink(f func(*conn, netlink.Link) error) error {
	c, err := dial(k.log, k.nsName, k.ns, false)
	if err != nil {
		return err
	}
	defer c.Close()
	l, err := c.link(k.podName)
	if err != nil {
		return err
	}
	return f(c, l)
}
