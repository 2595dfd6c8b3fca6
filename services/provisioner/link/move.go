package link

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// place is where a link is now and what it is called there. Attach and
// Detach keep it current step by step, so that a failure at any step knows
// where to restore the link from.
type place struct {
	at   *conn
	name string
}

// state is a link's identity at rest: what restore brings it back to.
type state struct {
	name string
	mac  net.HardwareAddr // nil: leave
	mtu  int              // 0: leave
	up   bool
	// settings are the link settings to set back (nil: none), the
	// sysctls once the link is in the host.
	settings *devicev1.LinkSettings
}

func stateOf(l netlink.Link) state {
	a := l.Attrs()
	return state{name: a.Name, mac: a.HardwareAddr, mtu: a.MTU, up: a.Flags&net.FlagUp != 0}
}

// move moves the link l, down and at p, into dst, where it is to be called
// name, with exactly one namespace move. A link cannot be renamed while up,
// and a move fails with EEXIST when the link's name is taken on the other
// side, so move picks a name to cross under that is free on the far side:
//
//   - name itself, renaming in the source first, when name is free there
//     (the usual case: the pod's side then only adds addresses and routes);
//   - otherwise the link's current name, renaming in dst after the move;
//   - otherwise (both taken) a random temporary name, renamed on both sides.
//
// The caller has checked that name is free in dst. move keeps p current and
// returns the link as dst sees it (its ifindex may change on the way).
func move(p *place, dst *conn, l netlink.Link, name string) (netlink.Link, error) {
	src := p.at
	via, err := crossingName(src, dst, p.name, name)
	if err != nil {
		return nil, err
	}
	if err := src.rename(l, via); err != nil {
		if via != name || !errors.Is(err, unix.EEXIST) {
			return nil, err
		}
		// name was free when looked at, and another link took it since
		// (another pod's attach crossing under the same name): cross under
		// another one.
		if via, err = otherCrossingName(src, dst, p.name); err != nil {
			return nil, err
		}
		if err := src.rename(l, via); err != nil {
			return nil, err
		}
	}
	p.name = via
	src.log.Debug("moving link", "from", src.name, "to", dst.name, "as", via, "then", name)
	if err := src.h.LinkSetNsFd(l, int(dst.ns)); err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%w: %w", ErrNameClash, err)
		}
		return nil, fmt.Errorf("moving %s into %s: %w", via, dst.name, err)
	}
	p.at = dst
	moved, err := dst.link(via)
	if err != nil {
		return nil, err
	}
	if err := dst.rename(moved, name); err != nil {
		return nil, err
	}
	p.name = name
	return moved, nil
}

// crossingName picks the name a link called cur in src crosses into dst
// under, to be called want there. See move.
func crossingName(src, dst *conn, cur, want string) (string, error) {
	if cur == want {
		return cur, nil
	}
	if ok, err := src.free(want, 0); err != nil || ok {
		return want, err
	}
	return otherCrossingName(src, dst, cur)
}

// otherCrossingName is crossingName's choice when want is taken in src:
// cur when it is free in dst, else a temporary name free on both sides.
func otherCrossingName(src, dst *conn, cur string) (string, error) {
	if ok, err := dst.free(cur, 0); err != nil || ok {
		return cur, err
	}
	for range 8 {
		n := tempName()
		okSrc, err := src.free(n, 0)
		if err != nil {
			return "", err
		}
		okDst, err := dst.free(n, 0)
		if err != nil {
			return "", err
		}
		if okSrc && okDst {
			return n, nil
		}
	}
	return "", fmt.Errorf("no free temporary name for %s in %s and %s: %w", cur, src.name, dst.name, ErrNameClash)
}

// restore brings the link at p back into the host namespace as want: set
// down, MAC, MTU and the settings that travel restored where it is (they
// survive the move), moved (when in a pod) or renamed (when in the host)
// to want.name, its sysctls written back in the host, set up if want.up.
// The kernel drops a link's addresses, routes and neighbours and takes it
// out of its VRF when it leaves a namespace, so restore does not delete
// them one by one. Nothing is changed when want.name is held by another
// host link (ErrNameClash). A setting that cannot be set back does not
// keep the link out of the host: it is the error restore returns once the
// link is back, so that a Detach is asked again.
func restore(p *place, host *conn, want state) error {
	l, err := p.at.link(p.name)
	if err != nil {
		return err
	}
	self := 0
	if p.at == host {
		self = l.Attrs().Index
	}
	if err := host.claim(want.name, self); err != nil {
		return err
	}
	if err := p.at.setDown(l); err != nil {
		return err
	}
	if err := p.at.setL2(l, want.mac, want.mtu); err != nil {
		return err
	}
	serr := p.at.restoreSettings(l, want.settings)
	if p.at == host {
		if err := host.rename(l, want.name); err != nil {
			return err
		}
		p.name = want.name
	} else if l, err = move(p, host, l, want.name); err != nil {
		return err
	}
	if err := host.writeSysctls(want.name, want.settings.GetSysctls()); err != nil {
		serr = errors.Join(serr, fmt.Errorf("restoring the sysctls of %s: %w", want.name, err))
	}
	if want.up {
		if err := host.setUp(l); err != nil {
			return errors.Join(serr, err)
		}
	}
	return serr
}
