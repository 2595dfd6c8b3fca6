package link

import (
	"fmt"
	"net"
	"net/netip"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/claimconfig"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/ippool"
)

// Limits the kernel puts on what Attach applies.
const (
	minMTU = 68 // the IPv4 minimum
	maxMTU = 65535
)

// FieldError is a field of a DeviceConfig (or LinkSnapshot) whose value
// cannot be applied; gRPC answers it as InvalidArgument.
type FieldError = fielderr.Error

// Validate checks the fields of cfg that Attach applies (podIfName,
// macAddress, mtu, addresses, routes, dhcp, rules, neighbors, vrf,
// linkSettings) without touching anything, and returns
// a *FieldError for the first bad one. Empty values mean "leave as is". A nil
// cfg is valid. The provisioner's server runs it on every request that
// carries a config (Setup, Attach, Detach) and the Mover trusts what passed,
// so a config that passes fails at Attach only for reasons the kernel alone
// knows (a clashing name, a driver's MTU limit, an unreachable gateway).
func Validate(cfg *devicev1.DeviceConfig) error {
	if cfg == nil {
		return nil
	}
	if err := claimconfig.ValidateIfName("podIfName", cfg.GetPodIfName()); err != nil {
		return err
	}
	if cfg.GetMacAddress() != "" {
		if _, err := parseMAC("macAddress", cfg.GetMacAddress()); err != nil {
			return err
		}
	}
	if mtu := cfg.GetMtu(); mtu != 0 && (mtu < minMTU || mtu > maxMTU) {
		return &FieldError{Field: "mtu", Reason: fmt.Sprintf("%d is out of range: 0 (keep) or %d..%d", mtu, minMTU, maxMTU)}
	}
	for i, a := range cfg.GetAddresses() {
		if _, err := parseAddress(fmt.Sprintf("addresses[%d]", i), a); err != nil {
			return err
		}
	}
	for i, r := range cfg.GetRoutes() {
		if _, _, err := parseRoute(fmt.Sprintf("routes[%d]", i), r); err != nil {
			return err
		}
	}
	if err := claimconfig.ValidateDHCP("", cfg.GetDhcp(), cfg.GetAddresses(), cfg.GetIpPools()); err != nil {
		return err
	}
	return claimconfig.ValidateNetwork(cfg, "linkSettings.")
}

// validateSnapshot checks a LinkSnapshot that Detach restores.
func validateSnapshot(s *devicev1.LinkSnapshot) error {
	if s.GetName() == "" {
		return &FieldError{Field: "originalLink.name", Reason: "required"}
	}
	if err := claimconfig.ValidateIfName("originalLink.name", s.GetName()); err != nil {
		return err
	}
	if s.GetMacAddress() != "" {
		if _, err := net.ParseMAC(s.GetMacAddress()); err != nil {
			return &FieldError{Field: "originalLink.macAddress", Reason: fmt.Sprintf("%q is not a MAC address", s.GetMacAddress())}
		}
	}
	return nil
}

func parseMAC(field, s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	switch {
	case err != nil:
		return nil, &FieldError{Field: field, Reason: fmt.Sprintf("%q is not a MAC address", s)}
	case len(mac) != 6:
		return nil, &FieldError{Field: field, Reason: fmt.Sprintf("%q is not a 48-bit Ethernet address", s)}
	case mac[0]&1 != 0:
		return nil, &FieldError{Field: field, Reason: fmt.Sprintf("%q is a multicast address", s)}
	case [6]byte(mac) == [6]byte{}:
		return nil, &FieldError{Field: field, Reason: fmt.Sprintf("%q is all zeros", s)}
	}
	return mac, nil
}

// parseAddress parses an interface address in CIDR form; host bits are the
// point (10.0.0.2/24).
func parseAddress(field, s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, &FieldError{Field: field, Reason: fmt.Sprintf("%q is not an address in CIDR form (10.0.0.2/24, fd00::2/64)", s)}
	}
	if reason := ippool.Unusable(p.Addr()); reason != "" {
		return netip.Prefix{}, &FieldError{Field: field, Reason: fmt.Sprintf("%q: %s", s, reason)}
	}
	return p, nil
}

// parseRoute parses a route's destination prefix (no host bits) and its
// optional gateway, of the same family.
func parseRoute(field string, r *devicev1.Route) (netip.Prefix, netip.Addr, error) {
	if r == nil {
		return netip.Prefix{}, netip.Addr{}, &FieldError{Field: field, Reason: "missing"}
	}
	df := field + ".destination"
	if r.GetDestination() == "" {
		return netip.Prefix{}, netip.Addr{}, &FieldError{Field: df, Reason: "required"}
	}
	dst, err := netip.ParsePrefix(r.GetDestination())
	switch {
	case err != nil:
		return netip.Prefix{}, netip.Addr{}, &FieldError{Field: df, Reason: fmt.Sprintf("%q is not a prefix in CIDR form (10.0.0.0/8, ::/0)", r.GetDestination())}
	case dst.Addr().Is4In6():
		return netip.Prefix{}, netip.Addr{}, &FieldError{Field: df, Reason: fmt.Sprintf("%q is IPv4-mapped IPv6; write it as IPv4", r.GetDestination())}
	case dst != dst.Masked():
		return netip.Prefix{}, netip.Addr{}, &FieldError{Field: df, Reason: fmt.Sprintf("%q has host bits set; the prefix is %s", r.GetDestination(), dst.Masked())}
	}
	if r.GetGateway() == "" {
		return dst, netip.Addr{}, nil
	}
	gf := field + ".gateway"
	gw, err := netip.ParseAddr(r.GetGateway())
	switch {
	case err != nil:
		return netip.Prefix{}, netip.Addr{}, &FieldError{Field: gf, Reason: fmt.Sprintf("%q is not an IP address", r.GetGateway())}
	case gw.Zone() != "":
		return netip.Prefix{}, netip.Addr{}, &FieldError{Field: gf, Reason: fmt.Sprintf("%q has a zone; the route's link is the zone", r.GetGateway())}
	case gw.Is4() != dst.Addr().Is4():
		return netip.Prefix{}, netip.Addr{}, &FieldError{Field: gf, Reason: fmt.Sprintf("%q is not of the destination's family (%s)", r.GetGateway(), dst)}
	}
	if reason := ippool.Unusable(gw); reason != "" {
		return netip.Prefix{}, netip.Addr{}, &FieldError{Field: gf, Reason: fmt.Sprintf("%q: %s", r.GetGateway(), reason)}
	}
	return dst, gw, nil
}
