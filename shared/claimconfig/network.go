package claimconfig

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/ippool"
)

// The versioned form of the parameters: both or neither.
const (
	APIVersion = "netdra.io/v1alpha1"
	Kind       = "NetworkConfig"
)

// Network is the part of the parameters that sets up the rest of the pod's
// network around the device's interface.
type Network struct {
	Rules          []Rule           `json:"rules,omitempty"`
	Neighbors      []Neighbor       `json:"neighbors,omitempty"`
	VRF            *VRF             `json:"vrf,omitempty"`
	Sysctls        map[string]int32 `json:"sysctls,omitempty"`
	TxQueueLen     *uint32          `json:"txqueuelen,omitempty"`
	GSOMaxSize     *uint32          `json:"gsoMaxSize,omitempty"`
	GROMaxSize     *uint32          `json:"groMaxSize,omitempty"`
	GSOIPv4MaxSize *uint32          `json:"gsoIPv4MaxSize,omitempty"`
	GROIPv4MaxSize *uint32          `json:"groIPv4MaxSize,omitempty"`
	Features       map[string]bool  `json:"features,omitempty"`
	PrivateFlags   map[string]bool  `json:"privateFlags,omitempty"`
	EbpfPrograms   *bool            `json:"ebpfPrograms,omitempty"`
}

// Rule is a policy routing rule in the pod.
type Rule struct {
	Priority uint32  `json:"priority,omitempty"`
	From     string  `json:"from,omitempty"`
	To       string  `json:"to,omitempty"`
	Table    uint32  `json:"table"`
	IIf      string  `json:"iif,omitempty"`
	OIf      string  `json:"oif,omitempty"`
	FwMark   *uint32 `json:"fwmark,omitempty"`
	FwMask   *uint32 `json:"fwmask,omitempty"`
}

// Neighbor is a permanent neighbour entry on the device's interface.
type Neighbor struct {
	Address string `json:"address"`
	MAC     string `json:"mac"`
}

// VRF is the VRF device the interface is enslaved to in the pod.
type VRF struct {
	Name  string `json:"name"`
	Table uint32 `json:"table"`
}

var routeScopes = map[string]devicev1.RouteScope{
	"universe": devicev1.RouteScope_ROUTE_SCOPE_UNIVERSE,
	"site":     devicev1.RouteScope_ROUTE_SCOPE_SITE,
	"link":     devicev1.RouteScope_ROUTE_SCOPE_LINK,
	"host":     devicev1.RouteScope_ROUTE_SCOPE_HOST,
}

// sysctlRange is the values a per-interface sysctl of the allow-list
// takes.
type sysctlRange struct{ min, max int32 }

// Sysctls is the allow-list of per-interface sysctls a claim may set, by
// the key it writes ("ipv4.rp_filter" is net.ipv4.conf.<if>.rp_filter),
// with the values each takes. Anything else is refused: the others either
// reach beyond the interface or are the node's to decide.
var Sysctls = map[string]sysctlRange{
	"ipv4.forwarding":        {0, 1},
	"ipv4.rp_filter":         {0, 2},
	"ipv4.arp_ignore":        {0, 8},
	"ipv4.arp_announce":      {0, 2},
	"ipv4.arp_filter":        {0, 1},
	"ipv4.arp_accept":        {0, 2},
	"ipv4.arp_notify":        {0, 1},
	"ipv4.proxy_arp":         {0, 1},
	"ipv4.accept_local":      {0, 1},
	"ipv4.accept_redirects":  {0, 1},
	"ipv4.send_redirects":    {0, 1},
	"ipv4.route_localnet":    {0, 1},
	"ipv4.src_valid_mark":    {0, 1},
	"ipv6.forwarding":        {0, 1},
	"ipv6.accept_ra":         {0, 2},
	"ipv6.accept_redirects":  {0, 1},
	"ipv6.autoconf":          {0, 1},
	"ipv6.disable_ipv6":      {0, 1},
	"ipv6.accept_dad":        {0, 2},
	"ipv6.dad_transmits":     {0, 10},
	"ipv6.use_tempaddr":      {-1, 2},
	"ipv6.addr_gen_mode":     {0, 3},
	"ipv6.hop_limit":         {1, 255},
	"ipv6.keep_addr_on_down": {-1, 1},
}

// SysctlPath is where the sysctl key (of Sysctls) of the interface ifName
// is under /proc/sys: net/ipv4/conf/<if>/rp_filter.
func SysctlPath(key, ifName string) string {
	family, name, _ := strings.Cut(key, ".")
	return "net/" + family + "/conf/" + ifName + "/" + name
}

// maxGSOSize is the kernel's GSO_MAX_SIZE and GRO_MAX_SIZE (Big TCP).
const maxGSOSize = 512 << 10

// maxEthtoolName is the longest ethtool string (ETH_GSTRING_LEN - 1).
const maxEthtoolName = 31

// validateVersion checks apiVersion and kind: both, or neither (the
// unversioned form).
func (p *Params) validateVersion() error {
	switch {
	case p.APIVersion == "" && p.Kind == "":
		return nil
	case p.APIVersion != APIVersion:
		if p.APIVersion == "" {
			return fielderr.New("apiVersion", "required with kind: %s", APIVersion)
		}
		return fielderr.New("apiVersion", "%q is not a known version: %s", p.APIVersion, APIVersion)
	case p.Kind != Kind:
		if p.Kind == "" {
			return fielderr.New("kind", "required with apiVersion: %s", Kind)
		}
		return fielderr.New("kind", "%q is not a known kind: %s", p.Kind, Kind)
	}
	return nil
}

// routes converts the routes, with their scope by name.
func (p *Params) routes() ([]*devicev1.Route, error) {
	var out []*devicev1.Route
	for i, r := range p.Routes {
		scope, ok := routeScopes[r.Scope]
		if r.Scope != "" && !ok {
			return nil, fielderr.New(fmt.Sprintf("routes[%d].scope", i), "%q is not universe, site, link or host", r.Scope)
		}
		out = append(out, &devicev1.Route{Destination: r.Destination, Gateway: r.Gateway, Table: r.Table, Scope: scope,
			Source: r.Source, Metric: r.Metric, Onlink: r.OnLink})
	}
	return out, nil
}

// into puts n into c.
func (n *Network) into(c *devicev1.DeviceConfig) {
	for _, r := range n.Rules {
		c.Rules = append(c.Rules, &devicev1.Rule{Priority: r.Priority, From: r.From, To: r.To, Table: r.Table,
			Iif: r.IIf, Oif: r.OIf, Fwmark: r.FwMark, Fwmask: r.FwMask})
	}
	for _, nb := range n.Neighbors {
		c.Neighbors = append(c.Neighbors, &devicev1.Neighbor{Address: nb.Address, Mac: strings.ToLower(nb.MAC)})
	}
	if n.VRF != nil {
		c.Vrf = &devicev1.Vrf{Name: n.VRF.Name, Table: n.VRF.Table}
	}
	s := &devicev1.LinkSettings{Txqueuelen: n.TxQueueLen, GsoMaxSize: n.GSOMaxSize, GroMaxSize: n.GROMaxSize,
		GsoIpv4MaxSize: n.GSOIPv4MaxSize, GroIpv4MaxSize: n.GROIPv4MaxSize, Features: n.Features,
		PrivateFlags: n.PrivateFlags, Sysctls: n.Sysctls}
	if !settingsEmpty(s) {
		c.LinkSettings = s
	}
	c.EbpfDisabled = n.EbpfPrograms != nil && !*n.EbpfPrograms
}

func settingsEmpty(s *devicev1.LinkSettings) bool {
	return s.Txqueuelen == nil && s.GsoMaxSize == nil && s.GroMaxSize == nil && s.GsoIpv4MaxSize == nil &&
		s.GroIpv4MaxSize == nil && len(s.Features) == 0 && len(s.PrivateFlags) == 0 && len(s.Sysctls) == 0
}

// ValidateNetwork checks what a DeviceConfig says of the pod's network
// beyond the interface's own identity: the routes' table, scope, source
// and onlink (their destination and gateway are checked with the rest),
// the rules, neighbours and VRF, and its link settings (their fields
// under settingsPrefix: "" as a claim writes them, "linkSettings." as a
// DeviceConfig has them). Errors are *fielderr.Error ("routes[1].table";
// "sysctls" with the key in the reason); the provisioner checks every
// request's config with it too.
func ValidateNetwork(c *devicev1.DeviceConfig, settingsPrefix string) error {
	for i, r := range c.GetRoutes() {
		if err := validRouteExtras(fmt.Sprintf("routes[%d]", i), r); err != nil {
			return err
		}
	}
	for i, r := range c.GetRules() {
		if err := validRule(fmt.Sprintf("rules[%d]", i), r); err != nil {
			return err
		}
	}
	for i, n := range c.GetNeighbors() {
		if err := validNeighbor(fmt.Sprintf("neighbors[%d]", i), n); err != nil {
			return err
		}
	}
	if err := validVRF(c); err != nil {
		return err
	}
	return ValidateLinkSettings(settingsPrefix, c.GetLinkSettings())
}

// validTable checks a routing table number: 253 (default) and 255 (local)
// are the kernel's; 0 is left to the caller.
func validTable(field string, t uint32) error {
	if t == 253 || t == 255 {
		return fielderr.New(field, "%d is one of the kernel's tables (253 default, 255 local)", t)
	}
	return nil
}

func validRouteExtras(field string, r *devicev1.Route) error {
	if err := validTable(field+".table", r.GetTable()); err != nil {
		return err
	}
	if _, ok := devicev1.RouteScope_name[int32(r.GetScope())]; !ok {
		return fielderr.New(field+".scope", "unknown scope %d", r.GetScope())
	}
	if r.GetOnlink() && r.GetGateway() == "" {
		return fielderr.New(field+".onlink", "needs a gateway")
	}
	if r.GetScope() == devicev1.RouteScope_ROUTE_SCOPE_LINK && r.GetGateway() != "" {
		return fielderr.New(field+".scope", "a route with a gateway cannot be of scope link")
	}
	if r.GetSource() == "" {
		return nil
	}
	src, err := netip.ParseAddr(r.GetSource())
	if err != nil || src.Zone() != "" {
		return fielderr.New(field+".source", "%q is not an IP address", r.GetSource())
	}
	if !ippool.Unicast(src) {
		return fielderr.New(field+".source", "%q is not a unicast address", r.GetSource())
	}
	if dst, err := netip.ParsePrefix(r.GetDestination()); err == nil && dst.Addr().Is4() != src.Is4() {
		return fielderr.New(field+".source", "%s and destination %s are of different IP families", r.GetSource(), r.GetDestination())
	}
	return nil
}

// rulePrefix parses a rule's from or to: a prefix without host bits.
func rulePrefix(field, s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil || p.Addr().Zone() != "":
		return p, fielderr.New(field, "%q is not a prefix in CIDR form (10.0.0.0/8, fd00::/64)", s)
	case p.Addr().Is4In6():
		return p, fielderr.New(field, "%q is IPv4-mapped IPv6; write it as IPv4", s)
	case p.Masked() != p:
		return p, fielderr.New(field, "%q has host bits set; the prefix is %s", s, p.Masked())
	}
	return p, nil
}

func validRule(field string, r *devicev1.Rule) error {
	from, err := rulePrefix(field+".from", r.GetFrom())
	if err != nil {
		return err
	}
	to, err := rulePrefix(field+".to", r.GetTo())
	if err != nil {
		return err
	}
	if from.IsValid() && to.IsValid() && from.Addr().Is4() != to.Addr().Is4() {
		return fielderr.New(field+".to", "%s and from %s are of different IP families", r.GetTo(), r.GetFrom())
	}
	if r.GetTable() == 0 {
		return fielderr.New(field+".table", "required: the table the rule looks up")
	}
	if err := validTable(field+".table", r.GetTable()); err != nil {
		return err
	}
	if err := ValidateIfName(field+".iif", r.GetIif()); err != nil {
		return err
	}
	if err := ValidateIfName(field+".oif", r.GetOif()); err != nil {
		return err
	}
	if r.Fwmask != nil && r.Fwmark == nil {
		return fielderr.New(field+".fwmask", "needs an fwmark")
	}
	return nil
}

func validNeighbor(field string, n *devicev1.Neighbor) error {
	a, err := netip.ParseAddr(n.GetAddress())
	if err != nil || a.Zone() != "" || a.Is4In6() {
		return fielderr.New(field+".address", "%q is not an IP address", n.GetAddress())
	}
	if !ippool.Unicast(a) {
		return fielderr.New(field+".address", "%q is not a unicast address", n.GetAddress())
	}
	mac, err := net.ParseMAC(n.GetMac())
	switch {
	case err != nil || len(mac) != 6:
		return fielderr.New(field+".mac", "%q is not a 48-bit MAC address", n.GetMac())
	case mac.String() == "00:00:00:00:00:00":
		return fielderr.New(field+".mac", "%q is all zeros", n.GetMac())
	}
	return nil
}

func validVRF(c *devicev1.DeviceConfig) error {
	v := c.GetVrf()
	if v == nil {
		return nil
	}
	if v.GetName() == "" {
		return fielderr.New("vrf.name", "required")
	}
	if err := ValidateIfName("vrf.name", v.GetName()); err != nil {
		return err
	}
	if v.GetName() == c.GetPodIfName() {
		return fielderr.New("vrf.name", "%q is the device's own name in the pod", v.GetName())
	}
	if v.GetTable() == 0 {
		return fielderr.New("vrf.table", "required")
	}
	return validTable("vrf.table", v.GetTable())
}

// ValidateLinkSettings checks link settings, as a claim asks them or as a
// snapshot holds them (the field names under prefix: "" for a claim's).
func ValidateLinkSettings(prefix string, s *devicev1.LinkSettings) error {
	if s == nil {
		return nil
	}
	name := func(f string) string { return prefix + f }
	if s.Txqueuelen != nil && s.GetTxqueuelen() > math.MaxInt32 {
		return fielderr.New(name("txqueuelen"), "%d is out of range 0..%d", s.GetTxqueuelen(), math.MaxInt32)
	}
	for _, f := range []struct {
		name string
		v    *uint32
	}{{"gsoMaxSize", s.GsoMaxSize}, {"groMaxSize", s.GroMaxSize}, {"gsoIPv4MaxSize", s.GsoIpv4MaxSize}, {"groIPv4MaxSize", s.GroIpv4MaxSize}} {
		if f.v != nil && (*f.v == 0 || *f.v > maxGSOSize) {
			return fielderr.New(name(f.name), "%d is out of range 1..%d", *f.v, maxGSOSize)
		}
	}
	for _, k := range sortedKeys(s.GetSysctls()) {
		r, ok := Sysctls[k]
		field := name("sysctls")
		if !ok {
			return fielderr.New(field, "%q is not a per-interface sysctl a claim may set (%s)", k, strings.Join(sortedKeys(Sysctls), ", "))
		}
		if v := s.GetSysctls()[k]; v < r.min || v > r.max {
			return fielderr.New(field, "%q: %d is out of range %d..%d", k, v, r.min, r.max)
		}
	}
	for _, m := range []struct {
		name string
		keys []string
	}{{"features", sortedKeys(s.GetFeatures())}, {"privateFlags", sortedKeys(s.GetPrivateFlags())}} {
		for _, k := range m.keys {
			if err := validEthtoolName(name(m.name), k); err != nil {
				return err
			}
		}
	}
	return nil
}

// validEthtoolName checks the name of a feature or private flag: what
// drivers name them, in letters, digits, '-', '_' and '.'.
func validEthtoolName(field, k string) error {
	if k == "" || len(k) > maxEthtoolName {
		return fielderr.New(field, "%q: a name is 1..%d bytes", k, maxEthtoolName)
	}
	if strings.IndexFunc(k, func(c rune) bool {
		return !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.')
	}) >= 0 {
		return fielderr.New(field, "%q: use letters, digits, '-', '_' and '.'", k)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return slices.Clip(keys)
}
