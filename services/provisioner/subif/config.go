package subif

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"regexp"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/shared/claimconfig"
	"github.com/netdra/netdra/shared/fielderr"
)

// Limits of a SubifConfig, as the NodeConfig CRD has them.
const (
	MaxParents   = 64
	MaxCount     = 1024
	maxPrefixLen = 58 // <prefix>-<index> is a device name of at most 63
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// offer is one configured entry: count sub-interfaces of sub.
type offer struct {
	name  string
	sub   *devicev1.SubInterface // the mode resolved to the kind's default
	count int
	// allowDefaultRoute offers the parent even when it is the uplink.
	allowDefaultRoute bool
	// bandwidth, set, shares the parent by bandwidth (bits per second):
	// one device, named as the entry, that many claims hold shares of;
	// defaultBandwidth is the share of a claim that asks for none.
	bandwidth, defaultBandwidth uint64
}

// Limits of a shared parent's bandwidth, in bits per second.
const (
	MinBandwidth = 1_000_000
	MaxBandwidth = 10_000_000_000_000
)

// countedName is a device name of a counted entry, <name>-<index>: a shared
// entry's name may not look like one.
var countedName = regexp.MustCompile(`-[0-9]+$`)

// kindModes are the modes of each kind, the default first.
var kindModes = map[devicev1.SubInterfaceKind][]devicev1.SubInterfaceMode{
	devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN: {
		devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_BRIDGE, devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PRIVATE,
		devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_VEPA, devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU},
	devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN: {
		devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L2, devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3,
		devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3S},
	devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN: nil,
}

// parseConfig checks cfg as the NodeConfig CRD does and resolves each
// entry's default mode. Fields are relative to cfg ("parents[0].count").
func parseConfig(cfg *provisionerv1.SubifConfig) ([]offer, error) {
	ps := cfg.GetParents()
	if len(ps) > MaxParents {
		return nil, fielderr.New("parents", "%d entries, more than %d", len(ps), MaxParents)
	}
	var out []offer
	seen := map[string]int{}
	for i, p := range ps {
		field := fmt.Sprintf("parents[%d]", i)
		o, err := parseParent(p)
		if err != nil {
			return nil, fielderr.Prefix(field, err)
		}
		if j, dup := seen[o.name]; dup {
			return nil, fielderr.New(field+".name", "%q is already the name of parents[%d]: names are unique", o.name, j)
		}
		seen[o.name] = i
		if err := sharesParent(out, o); err != nil {
			return nil, fielderr.Prefix(field, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// sharesParent checks o against the entries before it on the same parent,
// as the kernel has it: a parent takes macvlans or ipvlans, not both (one
// rx handler); every ipvlan of a parent has the same mode (the mode is
// the parent's ipvlan port's: a new one would change the others'); a
// passthru macvlan is its parent's only macvlan. VLAN links go with any.
func sharesParent(before []offer, o offer) error {
	for j, p := range before {
		if p.sub.GetParentIfName() != o.sub.GetParentIfName() {
			continue
		}
		pk, ok := p.sub.GetKind(), o.sub.GetKind()
		pt := devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU
		switch {
		case pk == ok && pk == devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN:
		case pk != ok && pk != devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN && ok != devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN:
			return fielderr.New("kind", "%s already has %ss (parents[%d]): a parent takes macvlans or ipvlans, not both", o.sub.GetParentIfName(), link.SubKindName(pk), j)
		case ok == devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN && pk == ok && p.sub.GetMode() != o.sub.GetMode():
			return fielderr.New("mode", "the ipvlans of %s are %v (parents[%d]): every ipvlan of a parent has the same mode", o.sub.GetParentIfName(), p.sub.GetMode(), j)
		case ok == devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN && pk == ok && (p.sub.GetMode() == pt || o.sub.GetMode() == pt):
			return fielderr.New("mode", "%s has other macvlans (parents[%d]): a passthru macvlan is its parent's only one", o.sub.GetParentIfName(), j)
		}
	}
	return nil
}

func parseParent(p *provisionerv1.SubifParent) (offer, error) {
	switch n := p.GetName(); {
	case n == "":
		return offer{}, fielderr.New("name", "required")
	case len(n) > maxPrefixLen:
		return offer{}, fielderr.New("name", "%q is longer than %d characters (device names are <name>-<index>)", n, maxPrefixLen)
	case !dnsLabel.MatchString(n):
		return offer{}, fielderr.New("name", "%q is not a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit", n)
	}
	if p.GetParentIfName() == "" {
		return offer{}, fielderr.New("parentIfName", "required")
	}
	if err := claimconfig.ValidateIfName("parentIfName", p.GetParentIfName()); err != nil {
		return offer{}, err
	}
	mode, err := resolveMode(p.GetKind(), p.GetMode())
	if err != nil {
		return offer{}, err
	}
	kind, count, vlan := p.GetKind(), p.GetCount(), p.GetVlanId()
	switch {
	case count > MaxCount:
		return offer{}, fielderr.New("count", "%d is out of range 0..%d", count, MaxCount)
	case mode == devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU && count > 1:
		return offer{}, fielderr.New("count", "%d: a passthru macvlan is the only macvlan of its parent: count 1 at most", count)
	case vlan != 0 && kind != devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN:
		return offer{}, fielderr.New("vlanId", "only a vlan sub-interface has a VLAN ID")
	case vlan > 4094:
		return offer{}, fielderr.New("vlanId", "%d is out of range 1..4094", vlan)
	}
	sub := &devicev1.SubInterface{Kind: kind, Mode: mode, ParentIfName: p.GetParentIfName(), VlanId: vlan}
	o := offer{name: p.GetName(), sub: sub, count: int(count), allowDefaultRoute: p.GetAllowDefaultRoute()}
	if err := parseBandwidth(p, &o); err != nil {
		return offer{}, err
	}
	return o, nil
}

// parseBandwidth checks a parent shared by bandwidth and sets o's: a
// macvlan (not passthru) or an ipvlan, count 0, a name unlike a counted
// device's, a bandwidth of 1M..10T bits per second and a default share of
// 1M..bandwidth (0: the whole bandwidth).
func parseBandwidth(p *provisionerv1.SubifParent, o *offer) error {
	bw, def := p.GetBandwidth(), p.GetDefaultBandwidth()
	switch {
	case bw == 0 && def == 0:
		return nil
	case bw == 0:
		return fielderr.New("defaultBandwidth", "set without a bandwidth")
	case o.sub.GetKind() == devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN || o.sub.GetMode() == devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU:
		return fielderr.New("bandwidth", "only macvlans (not passthru) and ipvlans share a parent by bandwidth")
	case o.count != 0:
		return fielderr.New("count", "%d: a parent shared by bandwidth is one device, its count 0", o.count)
	case countedName.MatchString(o.name):
		return fielderr.New("name", "%q ends in -<digits>, as a counted entry's devices do: a shared parent's device is named after its entry", o.name)
	case bw < MinBandwidth || bw > MaxBandwidth:
		return fielderr.New("bandwidth", "%d is out of range %d..%d (bits per second)", bw, uint64(MinBandwidth), uint64(MaxBandwidth))
	case def != 0 && (def < MinBandwidth || def > bw):
		return fielderr.New("defaultBandwidth", "%d is out of range %d..%d (the bandwidth)", def, uint64(MinBandwidth), bw)
	}
	o.bandwidth, o.defaultBandwidth = bw, cmp.Or(def, bw)
	return nil
}

// resolveMode checks mode against kind and returns it, or the kind's
// default for UNSPECIFIED.
func resolveMode(kind devicev1.SubInterfaceKind, mode devicev1.SubInterfaceMode) (devicev1.SubInterfaceMode, error) {
	modes, ok := kindModes[kind]
	switch {
	case kind == devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_UNSPECIFIED:
		return 0, fielderr.New("kind", "required: macvlan, ipvlan or vlan")
	case !ok:
		return 0, fielderr.New("kind", "unknown sub-interface kind %d", kind)
	case mode == devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_UNSPECIFIED:
		if len(modes) == 0 {
			return mode, nil
		}
		return modes[0], nil
	case len(modes) == 0:
		return 0, fielderr.New("mode", "a %s sub-interface has no mode", link.SubKindName(kind))
	}
	for _, m := range modes {
		if m == mode {
			return mode, nil
		}
	}
	return 0, fielderr.New("mode", "%v is not a %s mode", mode, link.SubKindName(kind))
}

// deviceName is the name of o's device i; a shared parent's one device is
// named as its entry.
func (o *offer) deviceName(i int) string {
	if o.shared() {
		return o.name
	}
	return fmt.Sprintf("%s-%d", o.name, i)
}

// shared reports whether o shares its parent by bandwidth.
func (o *offer) shared() bool { return o.bandwidth != 0 }

// devices is how many devices o offers: one when shared.
func (o *offer) devices() int {
	if o.shared() {
		return 1
	}
	return o.count
}

// kernelName is the name a device's link gets in the pod when the claim
// names none: the device name when it fits an interface name, otherwise
// "sub" and a hash of it.
func kernelName(device string) string {
	if len(device) <= 15 {
		return device
	}
	h := fnv.New32a()
	h.Write([]byte(device))
	return fmt.Sprintf("sub%08x", h.Sum32())
}

// device is o's device i, with its parent's MTU and state.
func (o *offer) device(i int, mtu uint32, state devicev1.LinkState) *devicev1.Device {
	name := o.deviceName(i)
	return &devicev1.Device{
		Name:              name,
		Manager:           devicev1.DeviceManager_DEVICE_MANAGER_SUBIF,
		KernelIfName:      kernelName(name),
		Driver:            link.SubKindName(o.sub.GetKind()),
		Mtu:               mtu,
		LinkState:         state,
		SubInterface:      proto.CloneOf(o.sub),
		BandwidthCapacity: o.bandwidth,
		BandwidthDefault:  o.defaultBandwidth,
	}
}
