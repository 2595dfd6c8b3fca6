package v1alpha1

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/netdra/netdra/shared/fielderr"
)

var (
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	ifName   = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	// countedName is how a counted entry's device names end.
	countedName = regexp.MustCompile(`-[0-9]+$`)
)

// validateSubif checks the subif manager's configuration as the CRD does:
// unique names (DNS labels of at most MaxSubifPrefixLen), a kernel name
// for each parent, a mode of the entry's kind, a passthru macvlan alone on
// its parent, a VLAN ID only on a vlan entry. Fields are relative to the
// config ("parents[1].mode").
func validateSubif(c *SubifConfig) error {
	if c == nil {
		return nil
	}
	if len(c.Parents) > MaxSubifParents {
		return fielderr.New("parents", "%d entries, more than %d", len(c.Parents), MaxSubifParents)
	}
	names := map[string]int{}
	for i, p := range c.Parents {
		field := fmt.Sprintf("parents[%d]", i)
		if err := fielderr.Prefix(field, validateSubifParent(&p)); err != nil {
			return err
		}
		if j, dup := names[p.Name]; dup {
			return fielderr.New(field+".name", "%q is already the name of parents[%d]: names are unique", p.Name, j)
		}
		names[p.Name] = i
		if err := fielderr.Prefix(field, sharesParent(c.Parents[:i], &p)); err != nil {
			return err
		}
	}
	return nil
}

// sharesParent checks p against the entries before it on the same parent,
// as the kernel has it: a parent takes macvlans or ipvlans, not both; the
// ipvlans of a parent have one mode; a passthru macvlan is its parent's
// only macvlan. VLAN links go with any.
func sharesParent(before []SubifParent, p *SubifParent) error {
	mode := func(q *SubifParent) string {
		if q.Mode == "" && len(SubifModes[q.Kind]) > 0 {
			return SubifModes[q.Kind][0]
		}
		return q.Mode
	}
	for j := range before {
		q := &before[j]
		switch {
		case q.ParentIfName != p.ParentIfName || q.Kind == SubifVLAN || p.Kind == SubifVLAN:
		case q.Kind != p.Kind:
			return fielderr.New("kind", "%s already has %ss (parents[%d]): a parent takes macvlans or ipvlans, not both", p.ParentIfName, q.Kind, j)
		case p.Kind == SubifIPvlan && mode(q) != mode(p):
			return fielderr.New("mode", "the ipvlans of %s are %s (parents[%d]): every ipvlan of a parent has the same mode", p.ParentIfName, mode(q), j)
		case p.Kind == SubifMacvlan && (mode(q) == "passthru" || mode(p) == "passthru"):
			return fielderr.New("mode", "%s has other macvlans (parents[%d]): a passthru macvlan is its parent's only one", p.ParentIfName, j)
		}
	}
	return nil
}

func validateSubifParent(p *SubifParent) error {
	switch {
	case p.Name == "":
		return fielderr.New("name", "required")
	case len(p.Name) > MaxSubifPrefixLen:
		return fielderr.New("name", "%q is longer than %d characters (device names are <name>-<index>)", p.Name, MaxSubifPrefixLen)
	case !dnsLabel.MatchString(p.Name):
		return fielderr.New("name", "%q is not a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit", p.Name)
	}
	switch n := p.ParentIfName; {
	case n == "":
		return fielderr.New("parentIfName", "required")
	case len(n) > MaxKernelIfNameLen:
		return fielderr.New("parentIfName", "%q is longer than %d bytes", n, MaxKernelIfNameLen)
	case !ifName.MatchString(n):
		return fielderr.New("parentIfName", "%q contains characters other than letters, digits, '.', '_' and '-'", n)
	case n == "." || n == ".." || n == "lo":
		return fielderr.New("parentIfName", "%q cannot be a parent", n)
	}
	modes, ok := SubifModes[p.Kind]
	switch {
	case p.Kind == "":
		return fielderr.New("kind", "required: macvlan, ipvlan or vlan")
	case !ok:
		return fielderr.New("kind", "%q is not a sub-interface kind: want macvlan, ipvlan or vlan", p.Kind)
	case p.Mode != "" && !slices.Contains(modes, p.Mode):
		if len(modes) == 0 {
			return fielderr.New("mode", "a %s sub-interface has no mode", p.Kind)
		}
		return fielderr.New("mode", "%q is not a %s mode: want one of %q", p.Mode, p.Kind, modes)
	case p.Count < 0 || p.Count > MaxSubifCount:
		return fielderr.New("count", "%d is out of range 0..%d", p.Count, MaxSubifCount)
	case p.Mode == "passthru" && p.Count > 1:
		return fielderr.New("count", "%d: a passthru macvlan is the only macvlan of its parent: count 1 at most", p.Count)
	case p.VLANID != 0 && p.Kind != SubifVLAN:
		return fielderr.New("vlanId", "only a vlan sub-interface has a VLAN ID, not a %s", p.Kind)
	case p.VLANID < 0 || p.VLANID > MaxVLANID:
		return fielderr.New("vlanId", "%d is out of range 1..%d", p.VLANID, MaxVLANID)
	}
	return validateSubifCapacity(p)
}

// validateSubifCapacity checks a parent shared by bandwidth: a macvlan
// (not passthru) or an ipvlan, count 0, a bandwidth from 1M to 10T and a
// default request from 1M to the bandwidth.
func validateSubifCapacity(p *SubifParent) error {
	c := p.Capacity
	switch {
	case c == nil:
		return nil
	case p.Kind == SubifVLAN || p.Mode == "passthru":
		return fielderr.New("capacity", "only macvlans (not passthru) and ipvlans share a parent by bandwidth, not a %s", cmp.Or(p.Mode, string(p.Kind)))
	case p.Count != 0:
		return fielderr.New("count", "%d: a parent shared by capacity is one device, its count 0", p.Count)
	case countedName.MatchString(p.Name):
		return fielderr.New("name", "%q ends in -<digits>, as a counted entry's devices do: a shared parent's device is named after its entry", p.Name)
	}
	bw, err := BitsPerSecond(c.Bandwidth)
	if err != nil || bw < MinSubifBandwidth || bw > MaxSubifBandwidth {
		return fielderr.New("capacity.bandwidth", "%q is not a bandwidth from 1M to 10T (bits per second: a whole number with an optional k, M, G or T)", c.Bandwidth)
	}
	if c.DefaultRequest == "" {
		return nil
	}
	if d, err := BitsPerSecond(c.DefaultRequest); err != nil || d < MinSubifBandwidth || d > bw {
		return fielderr.New("capacity.defaultRequest", "%q is not a bandwidth from 1M to %s (the bandwidth)", c.DefaultRequest, c.Bandwidth)
	}
	return nil
}

// bandwidth is how a shared parent's bandwidth is written.
var bandwidth = regexp.MustCompile(`^[0-9]{1,15}[kMGT]?$`)

// BitsPerSecond reads a bandwidth as SubifCapacity writes it ("10G",
// "500M", "2500000") as bits per second.
func BitsPerSecond(s string) (int64, error) {
	if !bandwidth.MatchString(s) {
		return 0, fmt.Errorf("%q is not a whole number with an optional k, M, G or T", s)
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, err
	}
	v, ok := q.AsInt64()
	if !ok {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return v, nil
}
