// Package link moves network links between the host network namespace and
// pod network namespaces and configures them there: name, MAC address, MTU,
// addresses, routes and up state, restoring the host's view of the link on
// the way back; in the kernel's exclusive RDMA netns mode it moves a link's
// RDMA device with it (AttachRDMA, DetachRDMA; see rdma.go). It is the only
// place in the provisioner that calls netlink for this, and it never
// switches a thread's namespace itself but to send an RDMA device's move,
// which the kernel requires (rdma.go): every socket is opened inside the
// namespace it talks to. Moving a link between namespaces is the expensive
// step (it holds the kernel's RTNL lock, so moves never run in parallel),
// so Attach and Detach move a link exactly once each and do everything
// else while the link is down, on whichever side is cheaper; a virtual
// link (a dummy) never moves at all: Create makes it inside the pod
// namespace and Remove deletes it there.
//
// Validate is the one check of a DeviceConfig. The provisioner's server
// runs it where a request comes in, and the Mover trusts the cfg it is
// given: Attach, Detach, Create and Remove parse cfg's values but check
// its podIfName and mtu nowhere else. A LinkSnapshot (what Detach restores,
// what Create starts from) is checked here, where it is used.
package link

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/shared/fielderr"
)

// Mover attaches host links to pod network namespaces and detaches them.
// Its methods are safe for concurrent use; calls on the same link must not
// overlap (the caller serializes per device).
type Mover struct {
	log    *slog.Logger
	hostNs netns.NsHandle
	// virtual makes the links Create creates (dummy links); kind is the
	// type they report.
	virtual func(netlink.LinkAttrs) netlink.Link
	kind    string
	// leases are the DHCP lease keepers, by host interface name
	// (dhcp.go); leaseDir is where they persist their leases ("": not).
	leasesMu sync.Mutex
	leases   map[string]*leaseKeeper
	leaseDir string
}

// Option configures a Mover.
type Option func(*Mover) error

// WithHostNetns makes the Mover treat the network namespace at path as the
// host's, instead of the namespace of the thread that calls NewMover. Tests
// use it to run in a throwaway namespace.
func WithHostNetns(path string) Option {
	return func(m *Mover) error {
		ns, err := netlinkns.Open(path)
		if err != nil {
			return err
		}
		m.hostNs = ns
		return nil
	}
}

// NewMover returns a Mover whose host namespace is the network namespace of
// the calling thread (or the one WithHostNetns names), held open until
// Close. A nil log discards.
func NewMover(log *slog.Logger, opts ...Option) (*Mover, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Mover{log: log, hostNs: netns.None(), virtual: newDummy}
	for _, o := range opts {
		if err := o(m); err != nil {
			m.Close()
			return nil, err
		}
	}
	if !m.hostNs.IsOpen() {
		runtime.LockOSThread()
		ns, err := netns.Get()
		runtime.UnlockOSThread()
		if err != nil {
			return nil, fmt.Errorf("opening the host netns: %w", err)
		}
		m.hostNs = ns
	}
	m.kind = m.virtual(netlink.LinkAttrs{}).Type()
	return m, nil
}

// HostNetns is a path to the host namespace (the open handle's, under
// /proc/self/fd), valid until Close.
func (m *Mover) HostNetns() string { return fmt.Sprintf("/proc/self/fd/%d", int(m.hostNs)) }

// Close stops the DHCP lease keepers, without releasing their leases (a
// restarted provisioner picks them up again: ResumeLease), and releases
// the host namespace. The Mover must not be used afterwards.
func (m *Mover) Close() error {
	m.stopLeases()
	if !m.hostNs.IsOpen() {
		return nil
	}
	return m.hostNs.Close()
}

// Snapshot reads the identity of the link hostIfName in the host namespace:
// name, MAC, MTU and whether it is administratively up. A missing link is
// ErrLinkNotFound.
func (m *Mover) Snapshot(ctx context.Context, hostIfName string) (*devicev1.LinkSnapshot, error) {
	var snap *devicev1.LinkSnapshot
	err := m.withHostLink(ctx, hostIfName, func(_ *conn, l netlink.Link) error {
		s := stateOf(l)
		snap = &devicev1.LinkSnapshot{Name: s.name, MacAddress: s.mac.String(), Mtu: uint32(s.mtu), Up: s.up}
		return nil
	})
	return snap, err
}

// withHostLink runs fn with a connection to the host namespace and its
// link hostIfName. A missing link is ErrLinkNotFound.
func (m *Mover) withHostLink(ctx context.Context, hostIfName string, fn func(host *conn, l netlink.Link) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	host, err := dial(m.log, "host", m.hostNs, false)
	if err != nil {
		return err
	}
	defer host.Close()
	l, err := host.link(hostIfName)
	if err != nil {
		return err
	}
	return fn(host, l)
}

// Attach moves the host link hostIfName into the network namespace at
// netnsPath and configures it as cfg says: named cfg.PodIfName (empty keeps
// the name), with cfg.MacAddress and cfg.Mtu when given, its addresses, up,
// and its routes (in that order: a route needs its link up). cfg must have
// passed Validate (Attach trusts it; a value that does not parse still
// fails before anything is touched). The link is set down, and its
// MAC, MTU and name are changed, in the host before the one move, so the pod
// side only adds addresses and routes; when the pod name is taken in the host
// by another link, the rename happens in the pod after the move (see move).
//
// Attach is idempotent: a link already in the pod namespace under the pod
// name (with the MAC cfg or orig gives) is configured again, which is a
// no-op when the config is applied (existing addresses and routes are kept).
// A pod name held by another link in the pod namespace fails with
// ErrNameClash before anything changes. Any other failure restores what
// Attach touched: the link is back in the host namespace with the name, MAC,
// MTU and up state it had when Attach began (orig, on the idempotent path).
// A host link that is nowhere is ErrLinkNotFound.
//
// IPv6 addresses are added with duplicate address detection, as the kernel
// does by default: they stay tentative (not bindable) for about a second
// after Attach returns.
//
// With cfg.Dhcp, the link takes its IPv4 address, routes and MTU from a
// DHCP server once it is up, before the claim's routes (dhcp.go), and a
// lease keeper holds the lease from then until Detach. No lease within
// DHCPTimeout fails the Attach (ErrNoLease, the error naming DHCP and the
// interface), which is undone as any other failure.
func (m *Mover) Attach(ctx context.Context, hostIfName string, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error {
	want, err := parseConfig(cfg)
	if err != nil {
		return err
	}
	if want.dhcp != nil {
		want.dhcp.m, want.dhcp.key = m, cmp.Or(orig.GetName(), hostIfName)
	}
	if err := m.attachLink(ctx, hostIfName, orig, netnsPath, cfg, want); err != nil {
		return err
	}
	if want.dhcp != nil && want.dhcp.lease != nil {
		podName := cmp.Or(cfg.GetPodIfName(), hostIfName)
		if err := m.keep(want.dhcp.key, netnsPath, podName, want.dhcp.lease, want); err != nil {
			m.log.Error("DHCP lease not kept: it ends unrenewed", "link", hostIfName, "error", err)
		}
	}
	return nil
}

// attachLink is Attach with cfg parsed (want).
func (m *Mover) attachLink(ctx context.Context, hostIfName string, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig, want config) error {
	if hostIfName == "" {
		return fmt.Errorf("attaching to %s: empty host interface name: %w", netnsPath, ErrLinkNotFound)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	host, pod, done, err := m.dialHostAndPod(netnsPath)
	if err != nil {
		return err
	}
	defer done()
	log := m.log.With("link", hostIfName, "netns", netnsPath)

	l, err := host.lookup(hostIfName)
	if err != nil {
		return err
	}
	podName := cmp.Or(cfg.GetPodIfName(), hostIfName)
	if l == nil {
		return reattach(ctx, log, host, pod, hostIfName, podName, orig, want)
	}
	if err := pod.claim(podName, 0); err != nil {
		return fmt.Errorf("attaching %s to %s: %w", hostIfName, netnsPath, err)
	}
	before := stateOf(l)
	if before.settings, err = host.readSettings(l, want.settings); err != nil {
		return fmt.Errorf("attaching %s to %s: %w", hostIfName, netnsPath, err)
	}
	p := &place{at: host, name: hostIfName}
	err = attach(ctx, p, pod, l, podName, want)
	if err == nil {
		log.Debug("attached", "podIfName", podName)
		return nil
	}
	err = fmt.Errorf("attaching %s to %s as %s: %w", hostIfName, netnsPath, podName, err)
	rerr := restore(p, host, before)
	if uerr := pod.unpod(want); uerr != nil {
		rerr = errors.Join(rerr, uerr)
	}
	if rerr != nil {
		log.Error("restoring link after a failed attach", "error", err, "restoreError", rerr, "at", p.at.name, "as", p.name)
		return errors.Join(err, fmt.Errorf("restoring %s: %w", hostIfName, rerr))
	}
	log.Warn("attach failed; link restored in the host", "error", err)
	return err
}

// attach does the work of Attach on the host link l, keeping p current.
func attach(ctx context.Context, p *place, pod *conn, l netlink.Link, podName string, want config) error {
	host := p.at
	if err := host.setDown(l); err != nil {
		return err
	}
	if err := host.setL2(l, want.mac, want.mtu); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l, err := move(p, pod, l, podName)
	if err != nil {
		return err
	}
	return configure(pod, l, want)
}

// reattach is Attach for a link that is no longer in the host under its
// name: it is success if the link is in the pod under podName, configured
// as want; an Attach that was cut short is finished (resume).
func reattach(ctx context.Context, log *slog.Logger, host, pod *conn, hostIfName, podName string, orig *devicev1.LinkSnapshot, want config) error {
	l, err := pod.lookup(podName)
	if err != nil {
		return err
	}
	mac := want.mac
	if mac == nil && orig.GetMacAddress() != "" {
		mac, _ = net.ParseMAC(orig.GetMacAddress())
	}
	if l == nil || (mac != nil && l.Attrs().HardwareAddr.String() != mac.String()) {
		return resume(ctx, log, host, pod, hostIfName, podName, orig, want)
	}
	a := l.Attrs()
	if (want.mac != nil && a.HardwareAddr.String() != want.mac.String()) || (want.mtu != 0 && a.MTU != want.mtu) {
		err = pod.setDown(l)
		if err == nil {
			err = pod.setL2(l, want.mac, want.mtu)
		}
	}
	if err == nil {
		err = configure(pod, l, want)
	}
	if err == nil {
		log.Debug("already attached", "podIfName", podName)
		return nil
	}
	err = fmt.Errorf("attaching to %s as %s: %w", pod.name, podName, err)
	if orig.GetName() == "" {
		return err
	}
	back, perr := parseSnapshot(orig)
	if perr == nil {
		perr = restore(&place{at: pod, name: podName}, host, back)
	}
	perr = errors.Join(perr, pod.unpod(want))
	if perr != nil {
		return errors.Join(err, fmt.Errorf("restoring %s: %w", orig.GetName(), perr))
	}
	return err
}

// configure applies want's link settings to l in pod (sysctls first, so
// that one like disable_ipv6 or accept_dad holds before the addresses),
// enslaves it to want's VRF, adds its addresses, sets it up, takes a DHCP
// lease (want.dhcp), adds its routes, neighbours and rules, and announces
// the addresses (see announce). Addresses, routes and rules that exist
// already are fine. A failure after the lease releases it again.
func configure(pod *conn, l netlink.Link, want config) (err error) {
	if err := pod.applySettings(l, want.settings); err != nil {
		return err
	}
	if err := pod.enslave(l, want.vrf); err != nil {
		return err
	}
	a := l.Attrs()
	for _, addr := range want.addresses {
		if err := pod.h.AddrAdd(l, addr); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("adding address %s to %s: %w", addr.IPNet, a.Name, err)
		}
	}
	if err := pod.setUp(l); err != nil {
		return err
	}
	if j := want.dhcp; j != nil {
		if err := j.run(context.Background(), pod, l, want); err != nil {
			return err
		}
		defer func() {
			if err != nil && j.lease != nil {
				err = errors.Join(err, j.undo(pod, a.Name, j.lease, want))
				j.lease = nil
			}
		}()
	}
	for i, r := range want.routes {
		r.LinkIndex = a.Index
		if err := pod.h.RouteAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
			// want.routes are the claim's routes, in its order.
			return fielderr.New(fmt.Sprintf("routes[%d]", i), "the kernel refused the route %s via %s dev %s table %d: %v", r.Dst, r.Gw, a.Name, r.Table, err)
		}
	}
	if err := pod.addNeighbors(l, want.neighbors); err != nil {
		return err
	}
	if err := pod.addRules(want.rules); err != nil {
		return err
	}
	// Telling the neighbours is best effort, as in the SR-IOV CNI: they
	// learn the address anyway, only later.
	if cur, err := pod.h.LinkByIndex(a.Index); err == nil {
		if err := announce(pod, cur, want.addresses); err != nil {
			pod.log.Warn("the neighbours were not told of the addresses", "link", a.Name, "err", err)
		}
	}
	return nil
}

// Detach brings a link back from the pod network namespace at netnsPath to
// the host: it finds the link by cfg.PodIfName (orig.Name when empty), sets
// it down, restores orig's MAC and MTU, moves it to the host under orig.Name
// and sets it up there if orig.Up. The kernel drops the link's addresses and
// routes as it leaves the pod namespace.
//
// Detach is idempotent: a link already in the host under orig.Name is
// success (its MAC, MTU and up state are brought back to orig if they
// differ). A netns that is gone (path missing, or no longer a network
// namespace) is success: the kernel returns physical links to the initial
// namespace when a namespace dies and deletes veths with it; if the link is
// already back in the host under the pod name, Detach restores it. orig.Name
// held by another host link is ErrNameClash, with the link left as it was; a
// link that is nowhere is ErrLinkNotFound. On other failures the link may be
// left down in the pod; calling Detach again finishes the job.
func (m *Mover) Detach(ctx context.Context, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error {
	back, err := parseSnapshot(orig)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	want, err := parseConfig(cfg)
	if err != nil {
		return err
	}
	podName := cmp.Or(cfg.GetPodIfName(), orig.GetName())
	log := m.log.With("link", orig.GetName(), "netns", netnsPath, "podIfName", podName)
	host, err := dial(m.log, "host", m.hostNs, false)
	if err != nil {
		return err
	}
	defer host.Close()

	pod, err := m.dialPod(netnsPath)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, netlinkns.ErrNotNetns) {
		log.Debug("netns is gone", "reason", err)
		if err := m.dropLease(orig.GetName(), nil, "", want); err != nil {
			return err
		}
		return detachGone(host, podName, cfg, back)
	}
	if err != nil {
		return err
	}
	defer pod.Close()

	l, p, err := podLink(pod, podName, orig.GetName(), back)
	if err != nil {
		return err
	}
	if l == nil {
		// Detached already, or never attached: the link is in the host.
		if err := m.dropLease(orig.GetName(), nil, "", want); err != nil {
			return err
		}
		if p, err = inHost(host, podName, cfg, back); err != nil {
			return err
		}
	} else {
		// The lease is released while the link is still in the pod,
		// on its network.
		if err := m.dropLease(orig.GetName(), pod, p.name, want); err != nil {
			return fmt.Errorf("detaching %s from %s: %w", podName, netnsPath, err)
		}
		if err := pod.leaveVRF(l); err != nil {
			return err
		}
	}
	if err := restore(p, host, back); err != nil {
		return fmt.Errorf("detaching %s from %s: %w", podName, netnsPath, err)
	}
	if err := pod.unpod(want); err != nil {
		return fmt.Errorf("detaching %s from %s: %w", podName, netnsPath, err)
	}
	log.Debug("detached")
	return nil
}

// podLink finds in the pod (pod) the link Detach takes back and where it
// is: under podName, else, after a Detach cut short (the provisioner died)
// renamed it already on its way out, under its host name hostName with
// its original MAC (restore sets the MAC back first, so the MAC tells it
// from a pod link of that name). A nil link is none in the pod.
func podLink(pod *conn, podName, hostName string, back state) (netlink.Link, *place, error) {
	l, err := pod.lookup(podName)
	if err != nil || l != nil || podName == hostName {
		return l, &place{at: pod, name: podName}, err
	}
	if l, err = pod.lookup(hostName); err != nil {
		return nil, nil, err
	}
	if l != nil && back.mac != nil && l.Attrs().HardwareAddr.String() != back.mac.String() {
		l = nil
	}
	return l, &place{at: pod, name: hostName}, nil
}

// CheckBack makes sure a link that was moved into a pod is back in the
// host, for a caller that no longer knows the pod's netns (a restarted
// provisioner freeing a device whose pod the runtime tore down without a
// Detach): back under its name, a physical link the kernel returned under
// its pod name (cfg's podIfName) renamed back, else ErrLinkLost.
func (m *Mover) CheckBack(ctx context.Context, orig *devicev1.LinkSnapshot, cfg *devicev1.DeviceConfig) error {
	back, err := parseSnapshot(orig)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	host, err := dial(m.log, "host", m.hostNs, false)
	if err != nil {
		return err
	}
	defer host.Close()
	return detachGone(host, cmp.Or(cfg.GetPodIfName(), orig.GetName()), cfg, back)
}

// detachGone is Detach for a pod namespace that no longer exists: the link
// is back in the host (under its own name, or a physical one the kernel
// returned under the pod's), or it is lost (ErrLinkLost).
func detachGone(host *conn, podName string, cfg *devicev1.DeviceConfig, back state) error {
	l, err := host.lookup(back.name)
	if err != nil || l != nil {
		return err
	}
	lost := fmt.Errorf("%s: %w", back.name, ErrLinkLost)
	if podName == back.name {
		return lost
	}
	// A physical link the kernel returned keeps the pod's name and MAC.
	l, err = host.lookup(podName)
	if err != nil {
		return err
	}
	if l == nil {
		return lost
	}
	mac := back.mac
	if cfg.GetMacAddress() != "" {
		mac, _ = net.ParseMAC(cfg.GetMacAddress())
	}
	if mac != nil && l.Attrs().HardwareAddr.String() != mac.String() {
		return lost // a host link that happens to have the pod name
	}
	return restore(&place{at: host, name: podName}, host, back)
}

// dialHostAndPod opens a socket in the host netns and one in the pod's at
// netnsPath; done closes both.
func (m *Mover) dialHostAndPod(netnsPath string) (host, pod *conn, done func(), err error) {
	if host, err = dial(m.log, "host", m.hostNs, false); err != nil {
		return nil, nil, nil, err
	}
	if pod, err = m.dialPod(netnsPath); err != nil {
		host.Close()
		return nil, nil, nil, err
	}
	return host, pod, func() { pod.Close(); host.Close() }, nil
}

// dialPod opens the pod network namespace at path and a socket in it.
func (m *Mover) dialPod(path string) (*conn, error) {
	ns, err := m.openPod(path)
	if err != nil {
		return nil, err
	}
	return dial(m.log, path, ns, true)
}

// openPod opens the pod network namespace at path, refusing the host's.
func (m *Mover) openPod(path string) (netns.NsHandle, error) {
	ns, err := netlinkns.Open(path)
	if err != nil {
		return netns.None(), err
	}
	if ns.Equal(m.hostNs) {
		ns.Close()
		return netns.None(), fmt.Errorf("%s: %w", path, ErrHostNetns)
	}
	return ns, nil
}

// config is a validated DeviceConfig in netlink's terms.
type config struct {
	mac       net.HardwareAddr
	mtu       int
	addresses []*netlink.Addr
	routes    []*netlink.Route
	rules     []podRule
	neighbors []podNeighbor
	vrf       *devicev1.Vrf
	settings  *devicev1.LinkSettings
	// dhcp is set when the claim asks for DHCP; Attach fills it in.
	dhcp *dhcpJob
}

// parseConfig converts a cfg that Validate accepted.
func parseConfig(cfg *devicev1.DeviceConfig) (config, error) {
	var c config
	if s := cfg.GetMacAddress(); s != "" {
		mac, err := parseMAC("macAddress", s)
		if err != nil {
			return config{}, err
		}
		c.mac = mac
	}
	c.mtu = int(cfg.GetMtu())
	for i, s := range cfg.GetAddresses() {
		p, err := parseAddress(fmt.Sprintf("addresses[%d]", i), s)
		if err != nil {
			return config{}, err
		}
		c.addresses = append(c.addresses, &netlink.Addr{IPNet: ipNet(p.Addr(), p.Bits())})
	}
	for i, r := range cfg.GetRoutes() {
		dst, gw, err := parseRoute(fmt.Sprintf("routes[%d]", i), r)
		if err != nil {
			return config{}, err
		}
		route := &netlink.Route{Dst: ipNet(dst.Addr(), dst.Bits()), Protocol: unix.RTPROT_STATIC}
		if gw.IsValid() {
			route.Gw = net.IP(gw.AsSlice())
		} else if dst.Addr().Is4() {
			route.Scope = netlink.SCOPE_LINK // as `ip route add <dst> dev <link>` does
		}
		parseRouteExtras(route, r, cfg.GetVrf())
		c.routes = append(c.routes, route)
	}
	c.rules = parseRules(cfg.GetRules())
	c.neighbors = parseNeighbors(cfg.GetNeighbors())
	c.vrf = cfg.GetVrf()
	c.settings = cfg.GetLinkSettings()
	if cfg.GetDhcp() {
		c.dhcp = &dhcpJob{}
	}
	return c, nil
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, a.BitLen())}
}

// parseSnapshot checks a LinkSnapshot (validateSnapshot) and converts it.
func parseSnapshot(s *devicev1.LinkSnapshot) (state, error) {
	if err := validateSnapshot(s); err != nil {
		return state{}, err
	}
	st := state{name: s.GetName(), mtu: int(s.GetMtu()), up: s.GetUp(), settings: s.GetSettings()}
	if s.GetMacAddress() != "" {
		st.mac, _ = net.ParseMAC(s.GetMacAddress()) // validateSnapshot parsed it
	}
	return st, nil
}
