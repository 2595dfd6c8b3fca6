package link

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/claimconfig"
	"github.com/netdra/netdra/shared/fielderr"
)

// Link settings that travel with an interface (txqueuelen, GSO/GRO max
// sizes, ethtool features and private flags) are read in the host before
// Attach changes them (ReadSettings, at Setup: the prepared device keeps
// them in its LinkSnapshot, so a restarted provisioner still has them) and
// written back on the way out (restore). Per-interface sysctls do not
// travel: the kernel gives a link the defaults of the namespace it enters,
// so the host's values are written back once the link is in the host
// again.

// ReadSettings reads what the host link hostIfName has of the settings
// want names, and of the IPv4 GSO/GRO max sizes with the GSO/GRO max
// sizes: the values Detach restores. nil when want names none. A missing
// link is ErrLinkNotFound.
func (m *Mover) ReadSettings(ctx context.Context, hostIfName string, want *devicev1.LinkSettings) (*devicev1.LinkSettings, error) {
	if settingsEmpty(want) {
		return nil, nil
	}
	var got *devicev1.LinkSettings
	err := m.withHostLink(ctx, hostIfName, func(host *conn, l netlink.Link) (err error) {
		got, err = host.readSettings(l, want)
		return err
	})
	return got, err
}

func settingsEmpty(s *devicev1.LinkSettings) bool {
	return s == nil || (s.Txqueuelen == nil && s.GsoMaxSize == nil && s.GroMaxSize == nil && s.GsoIpv4MaxSize == nil &&
		s.GroIpv4MaxSize == nil && len(s.Features) == 0 && len(s.PrivateFlags) == 0 && len(s.Sysctls) == 0)
}

// readSettings reads l's values of the settings want names.
func (c *conn) readSettings(l netlink.Link, want *devicev1.LinkSettings) (*devicev1.LinkSettings, error) {
	if settingsEmpty(want) {
		return nil, nil
	}
	a := l.Attrs()
	got := &devicev1.LinkSettings{}
	u32 := func(v uint32) *uint32 { return &v }
	if want.Txqueuelen != nil {
		got.Txqueuelen = u32(uint32(a.TxQLen))
	}
	if want.GsoMaxSize != nil {
		got.GsoMaxSize = u32(a.GSOMaxSize)
	}
	if want.GroMaxSize != nil {
		got.GroMaxSize = u32(a.GROMaxSize)
	}
	// A GSO (GRO) max size of 65536 or less sets the IPv4 one too: with
	// the first, the second is kept as well where the kernel has it.
	if want.GsoIpv4MaxSize != nil || want.GsoMaxSize != nil && a.GSOIPv4MaxSize != 0 {
		got.GsoIpv4MaxSize = u32(a.GSOIPv4MaxSize)
	}
	if want.GroIpv4MaxSize != nil || want.GroMaxSize != nil && a.GROIPv4MaxSize != 0 {
		got.GroIpv4MaxSize = u32(a.GROIPv4MaxSize)
	}
	var err error
	if len(want.GetSysctls()) > 0 {
		if got.Sysctls, err = c.readSysctls(a.Name, slices.Collect(maps.Keys(want.GetSysctls()))); err != nil {
			return nil, err
		}
	}
	if len(want.GetFeatures()) > 0 || len(want.GetPrivateFlags()) > 0 {
		e, err := c.ethtool()
		if err != nil {
			return nil, err
		}
		defer e.Close()
		if got.Features, got.PrivateFlags, err = e.read(a.Index, want); err != nil {
			return nil, err
		}
	}
	return got, nil
}

// applySettings sets l's settings to s. A value the kernel refuses is a
// *fielderr.Error naming the claim's field; what was set before it is the
// caller's to restore.
func (c *conn) applySettings(l netlink.Link, s *devicev1.LinkSettings) error {
	if settingsEmpty(s) {
		return nil
	}
	if err := c.writeSysctls(l.Attrs().Name, s.GetSysctls()); err != nil {
		return err
	}
	if err := c.applyLinkAttrs(l, s); err != nil {
		return err
	}
	if len(s.GetFeatures()) == 0 && len(s.GetPrivateFlags()) == 0 {
		return nil
	}
	e, err := c.ethtool()
	if err != nil {
		return err
	}
	defer e.Close()
	if err := e.setFeatures(l.Attrs().Index, s.GetFeatures()); err != nil {
		return err
	}
	return e.setPrivateFlags(l.Attrs().Index, s.GetPrivateFlags())
}

// applyLinkAttrs sets the txqueuelen and GSO/GRO max sizes s names, where
// they differ from l's. Each is compared with the link as the kernel has
// it after the ones before: setting a GSO (GRO) max size of 65536 or less
// sets the IPv4 one too, so an IPv4 size equal to the link's before may
// need setting again.
func (c *conn) applyLinkAttrs(l netlink.Link, s *devicev1.LinkSettings) error {
	a := l.Attrs()
	for _, f := range []struct {
		field string
		want  *uint32
		have  func(*netlink.LinkAttrs) uint32
		set   func(netlink.Link, int) error
		since bool // a kernel without the attribute reports 0
		moves bool // setting it may change a later one: read the link again
	}{
		{"txqueuelen", s.Txqueuelen, func(a *netlink.LinkAttrs) uint32 { return uint32(a.TxQLen) }, c.h.LinkSetTxQLen, false, false},
		{"gsoMaxSize", s.GsoMaxSize, func(a *netlink.LinkAttrs) uint32 { return a.GSOMaxSize }, c.h.LinkSetGSOMaxSize, false, true},
		{"groMaxSize", s.GroMaxSize, func(a *netlink.LinkAttrs) uint32 { return a.GROMaxSize }, c.h.LinkSetGROMaxSize, false, true},
		{"gsoIPv4MaxSize", s.GsoIpv4MaxSize, func(a *netlink.LinkAttrs) uint32 { return a.GSOIPv4MaxSize }, c.h.LinkSetGSOIPv4MaxSize, true, false},
		{"groIPv4MaxSize", s.GroIpv4MaxSize, func(a *netlink.LinkAttrs) uint32 { return a.GROIPv4MaxSize }, c.h.LinkSetGROIPv4MaxSize, true, false},
	} {
		if f.want == nil || *f.want == f.have(a) {
			continue
		}
		if f.since && f.have(a) == 0 {
			return fielderr.New(f.field, "the kernel has none for %s (the IPv4 sizes are Linux 6.3's)", a.Name)
		}
		if err := f.set(l, int(*f.want)); err != nil {
			return fmt.Errorf("setting %s of %s in %s: %w", f.field, a.Name, c.name,
				fielderr.New(f.field, "%d: the kernel refused it for %s: %v", *f.want, a.Name, err))
		}
		if !f.moves {
			continue
		}
		now, err := c.h.LinkByIndex(a.Index)
		if err != nil {
			return fmt.Errorf("reading %s in %s back after setting %s: %w", a.Name, c.name, f.field, err)
		}
		a = now.Attrs()
	}
	return nil
}

// sysctlRoot is where the sysctls are; a thread switched into a
// namespace sees that namespace's net sysctls there.
const sysctlRoot = "/proc/sys"

// readSysctls reads the per-interface sysctls keys (of
// claimconfig.Sysctls) of the interface ifName in c's namespace.
func (c *conn) readSysctls(ifName string, keys []string) (map[string]int32, error) {
	got := map[string]int32{}
	err := inNetns(c.ns, func() error {
		for _, k := range keys {
			b, err := os.ReadFile(filepath.Join(sysctlRoot, claimconfig.SysctlPath(k, ifName)))
			if err != nil {
				return fmt.Errorf("reading sysctl %s of %s in %s: %w", k, ifName, c.name, err)
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 32)
			if err != nil {
				return fmt.Errorf("reading sysctl %s of %s in %s: %q is not a number", k, ifName, c.name, b)
			}
			got[k] = int32(v)
		}
		return nil
	})
	return got, err
}

// writeSysctls writes the per-interface sysctls s of the interface ifName
// in c's namespace, IPv4's before IPv6's (sorted), so that a claim's
// disable_ipv6 comes before its addresses.
func (c *conn) writeSysctls(ifName string, s map[string]int32) error {
	if len(s) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(s))
	return inNetns(c.ns, func() error {
		for _, k := range keys {
			p := filepath.Join(sysctlRoot, claimconfig.SysctlPath(k, ifName))
			if err := os.WriteFile(p, []byte(strconv.Itoa(int(s[k]))), 0); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return fielderr.New("sysctls", "%q: the kernel has none for %s", k, ifName)
				}
				return fmt.Errorf("writing sysctl %s of %s in %s: %w", k, ifName, c.name, fielderr.New("sysctls", "%q: %d: %v", k, s[k], err))
			}
		}
		return nil
	})
}

// restoreSettings sets back on l, at c, the settings that travel with it
// (all of orig but the sysctls, which restoreSysctls writes once the link
// is in the host).
func (c *conn) restoreSettings(l netlink.Link, orig *devicev1.LinkSettings) error {
	if settingsEmpty(orig) {
		return nil
	}
	travels := &devicev1.LinkSettings{Txqueuelen: orig.Txqueuelen, GsoMaxSize: orig.GsoMaxSize, GroMaxSize: orig.GroMaxSize,
		GsoIpv4MaxSize: orig.GsoIpv4MaxSize, GroIpv4MaxSize: orig.GroIpv4MaxSize, Features: orig.Features, PrivateFlags: orig.PrivateFlags}
	if err := c.applySettings(l, travels); err != nil {
		return fmt.Errorf("restoring the settings of %s: %w", l.Attrs().Name, err)
	}
	return nil
}
