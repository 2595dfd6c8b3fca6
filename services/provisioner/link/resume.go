package link

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
)

// A move is a rename and a namespace move (see move), and the provisioner
// may be killed between the two: an Attach cut short leaves the link down
// in the host under the pod's name (or a temporary crossing name), or in
// the pod under its host name; a Detach cut short leaves it in the pod
// under its host name (Detach finds that itself) or in the host under the
// pod's name. The next Attach or Detach of the device finds it there by
// its MAC, which every move sets before the rename, and finishes the job.

// tempPrefix starts every temporary crossing name (tempName).
const tempPrefix = "netdra"

// cutShort finds in c the link a move cut short left there: down, with
// one of macs, under one of names or a temporary crossing name; nil when
// there is none, or when no MAC is known (a link of that name might be
// another's). The temporary names are looked for in a dump of c's links,
// so only on a path where the link was not found where it should be.
func cutShort(c *conn, macs []net.HardwareAddr, names ...string) (netlink.Link, error) {
	macs = slices.DeleteFunc(slices.Clone(macs), func(m net.HardwareAddr) bool { return m == nil })
	if len(macs) == 0 {
		return nil, nil
	}
	ours := func(l netlink.Link) bool {
		a := l.Attrs()
		return a.Flags&net.FlagUp == 0 && slices.ContainsFunc(macs, func(m net.HardwareAddr) bool { return m.String() == a.HardwareAddr.String() })
	}
	for _, name := range names {
		l, err := c.lookup(name)
		if err != nil {
			return nil, err
		}
		if l != nil && ours(l) {
			return l, nil
		}
	}
	links, err := netlinkns.RetryDump(c.h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("listing the links in %s: %w", c.name, err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, tempPrefix) && ours(l) {
			return l, nil
		}
	}
	return nil, nil
}

// resume finishes an Attach that was cut short (see above) from where it
// stopped: the link down in the host under the pod's name or a crossing
// name is moved on, the link in the pod under its host name or a crossing
// name renamed. ErrLinkNotFound when the link is not there either; any
// other failure restores the link in the host as orig (as Attach does).
func resume(ctx context.Context, log *slog.Logger, host, pod *conn, hostIfName, podName string, orig *devicev1.LinkSnapshot, want config) error {
	back := state{name: hostIfName}
	if orig.GetName() != "" {
		b, err := parseSnapshot(orig)
		if err != nil {
			return err
		}
		back = b
	}
	// Every move sets the link's MAC before its rename.
	mac := want.mac
	if mac == nil {
		mac = back.mac
	}
	macs := []net.HardwareAddr{mac}
	p := &place{at: host}
	l, err := cutShort(host, macs, podName)
	if err == nil && l == nil {
		p.at = pod
		l, err = cutShort(pod, macs, hostIfName)
	}
	if err != nil {
		return err
	}
	if l == nil {
		return fmt.Errorf("attaching to %s as %s: %w", pod.name, podName, ErrLinkNotFound)
	}
	p.name = l.Attrs().Name
	log.Warn("Resuming an attach that was cut short", "at", p.at.name, "as", p.name, "mac", mac)
	self := 0
	if p.at == pod {
		self = l.Attrs().Index
	}
	if err := pod.claim(podName, self); err != nil {
		return fmt.Errorf("attaching %s to %s: %w", hostIfName, pod.name, err)
	}
	if p.at == host {
		err = attach(ctx, p, pod, l, podName, want)
	} else if err = pod.rename(l, podName); err == nil {
		p.name = podName
		err = configure(pod, l, want)
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("attaching %s to %s as %s: %w", hostIfName, pod.name, podName, err)
	if rerr := restore(p, host, back); rerr != nil {
		return errors.Join(err, fmt.Errorf("restoring %s: %w", hostIfName, rerr))
	}
	return err
}

// inHost is where the link of a device that is not in its pod is in the
// host: under its own name, else where a move cut short left it (the
// pod's name or a crossing name; with the pod's MAC, which an Attach sets
// before its rename, or its own, which a Detach sets back before its).
// When it is in neither, its own name: restoring it there fails with
// ErrLinkNotFound.
func inHost(host *conn, podName string, cfg *devicev1.DeviceConfig, back state) (*place, error) {
	p := &place{at: host, name: back.name}
	l, err := host.lookup(back.name)
	if err != nil || l != nil {
		return p, err
	}
	var podMAC net.HardwareAddr
	if cfg.GetMacAddress() != "" {
		podMAC, _ = net.ParseMAC(cfg.GetMacAddress()) // Validate parsed it
	}
	if l, err = cutShort(host, []net.HardwareAddr{podMAC, back.mac}, podName); err != nil || l == nil {
		return p, err
	}
	p.name = l.Attrs().Name
	return p, nil
}
