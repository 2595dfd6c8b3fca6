// Which pool publishes each device, by the reference
// design's rules: a pool's filter fields are ANDed (an empty field matches
// any device); a device that has allocations stays in the pool they
// recorded for as long as they exist; a device whose allocations name
// different pools is ambiguous and not advertised; any other device goes to
// the alphabetically first pool whose filter matches it, with an error
// logged when several match. Every configured pool is published, even
// empty.
package publish

import (
	"log/slog"
	"path"
	"slices"
	"strings"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/managername"
)

// Filter selects devices. Set fields are ANDed; within a field, any value
// matches.
type Filter struct {
	// DeviceManagers are "sr-iov", "dummy", "host" or "subif".
	DeviceManagers []string
	PFNames        []string
	PCIAddrs       []string
	VendorIDs      []string
	DeviceIDs      []string
	Drivers        []string
	// IfNames match the device's name or its kernel interface name; a value
	// identifies one device, so it may appear in one pool only.
	IfNames []string
	// ParentIfNames match the device's parent link (a VF's PF, a
	// sub-interface's parent).
	ParentIfNames []string
}

// Spec is a configured pool.
type Spec struct {
	Name   string
	Filter Filter
	// TaintEffect is the effect of the taint on an unhealthy device (see
	// Taints): "NoSchedule", "NoExecute", or "None" for no taint;
	// "" is NoSchedule.
	TaintEffect string
	// MultusResourceName, when not "", is published on the pool's devices
	// with their Multus device IDs (see MultusAttributes).
	MultusResourceName string
	// IPPools are the address pools the claims for the pool's devices
	// take addresses from (see MarkExhausted).
	IPPools []string
}

// Pool is a pool to publish.
type Pool struct {
	Name    string
	Devices []*devicev1.Device
	// TaintEffect and MultusResourceName are the Spec's ("" for a pool
	// no longer configured).
	TaintEffect        string
	MultusResourceName string
	// ExhaustedIPPools are the Spec's IPPools that have no free address,
	// sorted (MarkExhausted).
	ExhaustedIPPools []string
}

// MarkExhausted sets each pool's ExhaustedIPPools: the IPPools of its
// spec that exhausted holds.
func MarkExhausted(ps []Pool, specs []Spec, exhausted map[string]bool) {
	byName := map[string]Spec{}
	for _, s := range specs {
		byName[s.Name] = s
	}
	for i := range ps {
		ps[i].ExhaustedIPPools = nil
		for _, n := range byName[ps[i].Name].IPPools {
			if exhausted[n] {
				ps[i].ExhaustedIPPools = append(ps[i].ExhaustedIPPools, n)
			}
		}
		slices.Sort(ps[i].ExhaustedIPPools)
	}
}

// Matches reports whether f selects d.
func (f *Filter) Matches(d *devicev1.Device) bool {
	return anyOf(f.DeviceManagers, managername.Of(d.GetManager())) &&
		anyOf(f.PFNames, d.GetPfName()) &&
		anyOf(f.PCIAddrs, d.GetPciAddress()) &&
		anyFold(f.VendorIDs, d.GetVendorId()) &&
		anyFold(f.DeviceIDs, d.GetDeviceId()) &&
		anyOf(f.Drivers, d.GetDriver()) &&
		(len(f.IfNames) == 0 || slices.Contains(f.IfNames, d.GetName()) || anyOf(f.IfNames, d.GetKernelIfName())) &&
		anyOf(f.ParentIfNames, ParentIfName(d))
}

// ParentIfName is the link d hangs off: a sub-interface's parent, a VF's
// PF, or "".
func ParentIfName(d *devicev1.Device) string {
	if p := d.GetSubInterface().GetParentIfName(); p != "" {
		return p
	}
	return d.GetPfName()
}

// anyOf: an empty list matches anything; otherwise v must be one of the
// values (shell globs allowed) and not empty.
func anyOf(values []string, v string) bool {
	if len(values) == 0 {
		return true
	}
	if v == "" {
		return false
	}
	for _, want := range values {
		if ok, _ := path.Match(want, v); ok || want == v {
			return true
		}
	}
	return false
}

// anyFold compares PCI IDs, which may be written 0x8086 or 8086, any case.
func anyFold(values []string, v string) bool {
	if len(values) == 0 {
		return true
	}
	norm := func(s string) string { return strings.TrimPrefix(strings.ToLower(s), "0x") }
	return slices.ContainsFunc(values, func(want string) bool { return v != "" && norm(want) == norm(v) })
}

// Assign returns every configured pool with its devices, plus any pool that
// is no longer configured but still holds allocated devices, sorted by
// name, each pool's devices sorted by name.
func Assign(log *slog.Logger, specs []Spec, devices []*devicev1.Device, allocs []*statev1.Allocation) []Pool {
	pinned := map[string][]string{} // device -> pools its allocations recorded
	for _, a := range allocs {
		if !slices.Contains(pinned[a.GetDeviceName()], a.GetPool()) {
			pinned[a.GetDeviceName()] = append(pinned[a.GetDeviceName()], a.GetPool())
		}
	}
	sorted := slices.Clone(specs)
	slices.SortFunc(sorted, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	byName := map[string]*Pool{}
	for _, s := range sorted {
		byName[s.Name] = &Pool{Name: s.Name, TaintEffect: s.TaintEffect, MultusResourceName: s.MultusResourceName}
	}
	for _, d := range devices {
		name := poolFor(log, sorted, d, pinned[d.GetName()])
		if name == "" {
			continue
		}
		if byName[name] == nil {
			byName[name] = &Pool{Name: name}
		}
		byName[name].Devices = append(byName[name].Devices, d)
	}
	out := make([]Pool, 0, len(byName))
	for _, p := range byName {
		slices.SortFunc(p.Devices, func(a, b *devicev1.Device) int { return strings.Compare(a.GetName(), b.GetName()) })
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Pool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// poolFor is the pool d is published in, or "" for none.
func poolFor(log *slog.Logger, sorted []Spec, d *devicev1.Device, pinnedTo []string) string {
	switch len(pinnedTo) {
	case 0:
	case 1:
		return pinnedTo[0]
	default:
		log.Error("Device allocated in several pools; not advertised", "device", d.GetName(), "pools", pinnedTo)
		return ""
	}
	var matched []string
	for _, s := range sorted {
		if s.Filter.Matches(d) {
			matched = append(matched, s.Name)
		}
	}
	if len(matched) > 1 {
		log.Error("Device matches several pools; using the first", "device", d.GetName(), "pools", matched)
	}
	if len(matched) == 0 {
		return ""
	}
	return matched[0]
}
