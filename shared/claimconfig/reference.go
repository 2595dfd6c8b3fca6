package claimconfig

import (
	"fmt"
	"slices"
	"strings"
)

// Param documents one parameter: its name as a claim writes it (a
// sub-object's fields as "routes[].table"), what it takes and an example.
type Param struct {
	Name, Type, Doc, Example string
}

// Reference is every parameter, documented: docs/claims.md's claim
// reference is generated from it (Markdown), and a test fails when a
// parameter has no row or that copy is stale.
var Reference = []Param{
	{"apiVersion", "string", "`" + APIVersion + "`, with `kind`; or neither (the unversioned form). Any other is refused.", `"apiVersion": "` + APIVersion + `"`},
	{"kind", "string", "`" + Kind + "`, with `apiVersion`.", `"kind": "` + Kind + `"`},
	{"podIfName", "string", "The interface's name in the pod (letters, digits, `.`, `_`, `-`; at most 15; not `lo`).", `"podIfName": "net1"`},
	{"vlan", "0..4094", "VLAN ID (0 clears): on the PF for a VF, by the eBPF programs for host and dummy devices, the VLAN ID of a VLAN sub-interface.", `"vlan": 100`},
	{"vlanQoS", "0..7", "Priority of the VLAN's frames; needs a vlan.", `"vlanQoS": 3`},
	{"vlanProto", "`802.1q` \\| `802.1ad`", "VLAN protocol; needs a vlan.", `"vlanProto": "802.1ad"`},
	{"mac", "MAC", "A unicast MAC address for the interface.", `"mac": "02:aa:00:00:00:01"`},
	{"spoofChk", "bool", "Drop frames from another source MAC.", `"spoofChk": true`},
	{"trust", "bool", "A VF's trust mode.", `"trust": true`},
	{"linkState", "`auto` \\| `enable` \\| `disable`", "A VF's link state as its PF forces it.", `"linkState": "enable"`},
	{"minTxRate", "Mbit/s", "A VF's minimum Tx rate; at most maxTxRate.", `"minTxRate": 100`},
	{"maxTxRate", "Mbit/s", "A VF's maximum Tx rate; 0: none.", `"maxTxRate": 1000`},
	{"mtu", "68..65535", "The interface's MTU.", `"mtu": 9000`},
	{"addresses", "[CIDR]", "Addresses of the interface.", `"addresses": ["10.0.0.2/24", "fd00::2/64"]`},
	{"ipPools", "[name]", "At most two node-local address pools (one per family) to take an address from.", `"ipPools": ["v4"]`},
	{"dhcp", "bool", "true: the interface takes its IPv4 address, its routes (router, classless static routes) and its MTU from a DHCP server on its network, and keeps the lease while the pod lives (renewed; released at detach; removed when it expires unrenewed). Attach fails, with nothing left configured, when no server answers in time. Exclusive with addresses and ipPools; not for a link created in the pod (dummy, sub-interface). The claim's mtu, when set, wins over the server's.", `"dhcp": true`},
	{"vfio", "bool", "true: a VF bound to vfio-pci (DPDK), with its /dev/vfio nodes and no interface, so none of the interface's parameters; false: a device with an interface.", `"vfio": true`},
	{"routes", "[object]", "Routes through the interface; `0.0.0.0/0` and `::/0` are default routes.", `"routes": [{"destination": "0.0.0.0/0", "gateway": "10.0.0.1"}]`},
	{"routes[].destination", "prefix", "Required; no host bits.", `"destination": "10.1.0.0/16"`},
	{"routes[].gateway", "IP", "Next hop, of the destination's family.", `"gateway": "10.0.0.1"`},
	{"routes[].table", "table", "Routing table; 0: main, or the VRF's with `vrf`; not 253 or 255.", `"table": 100`},
	{"routes[].scope", "`universe` \\| `site` \\| `link` \\| `host`", "Scope; unset: link without a gateway, universe with one.", `"scope": "link"`},
	{"routes[].source", "IP", "Preferred source address, of the destination's family.", `"source": "10.0.0.2"`},
	{"routes[].metric", "uint32", "Metric (priority).", `"metric": 100`},
	{"routes[].onlink", "bool", "The gateway is on the link even when no prefix of it covers it; needs a gateway.", `"onlink": true`},
	{"rules", "[object]", "Policy routing rules added in the pod; deleted at detach. With neither from nor to, one rule per family.", `"rules": [{"priority": 100, "from": "10.0.0.0/24", "table": 100}]`},
	{"rules[].priority", "uint32", "Priority; 0: the kernel's choice.", `"priority": 100`},
	{"rules[].from", "prefix", "Source prefix to match.", `"from": "10.0.0.0/24"`},
	{"rules[].to", "prefix", "Destination prefix to match, of from's family.", `"to": "fd00:1::/64"`},
	{"rules[].table", "table", "Required: the table to look up; not 253 or 255.", `"table": 100`},
	{"rules[].iif", "name", "Input interface in the pod to match.", `"iif": "net1"`},
	{"rules[].oif", "name", "Output interface in the pod to match.", `"oif": "net1"`},
	{"rules[].fwmark", "uint32", "Firewall mark to match.", `"fwmark": 7`},
	{"rules[].fwmask", "uint32", "Mask of the mark; needs fwmark.", `"fwmask": 255`},
	{"neighbors", "[object]", "Permanent neighbour entries (ARP, NDP) on the interface.", `"neighbors": [{"address": "10.0.0.1", "mac": "02:00:00:00:00:01"}]`},
	{"neighbors[].address", "IP", "Required: the neighbour's unicast address.", `"address": "fd00::1"`},
	{"neighbors[].mac", "MAC", "Required: its MAC address.", `"mac": "02:00:00:00:00:01"`},
	{"vrf", "object", "A VRF in the pod the interface is enslaved to, created when the pod has none of that name; deleted at detach when netdra made it and nothing is enslaved to it. Two claims of a pod may name one VRF, with one table.", `"vrf": {"name": "red", "table": 10}`},
	{"vrf.name", "name", "Required: the VRF device's name in the pod.", `"name": "red"`},
	{"vrf.table", "table", "Required: its table; not 253 or 255.", `"table": 10`},
	{"sysctls", "{key: int}", "Per-interface sysctls (`ipv4.rp_filter` is net.ipv4.conf.<if>.rp_filter) from an allow-list: " + sysctlList() + ". Others are refused naming the key. A moved link gets the host's values back at detach.", `"sysctls": {"ipv4.rp_filter": 2, "ipv6.accept_ra": 0}`},
	{"txqueuelen", "uint32", "Transmit queue length; set back at detach.", `"txqueuelen": 5000`},
	{"gsoMaxSize", "1..524288", "GSO max size (IPv6 Big TCP above 65536); at most the device's TSO max; set back at detach.", `"gsoMaxSize": 196608`},
	{"groMaxSize", "1..524288", "GRO max size; set back at detach.", `"groMaxSize": 196608`},
	{"gsoIPv4MaxSize", "1..524288", "GSO max size for IPv4 (Big TCP over IPv4, Linux 6.3 and later; an older kernel refuses it naming it); set back at detach.", `"gsoIPv4MaxSize": 196608`},
	{"groIPv4MaxSize", "1..524288", "GRO max size for IPv4 (Linux 6.3 and later; an older kernel refuses it naming it); set back at detach.", `"groIPv4MaxSize": 196608`},
	{"features", "{name: bool}", "ethtool features by the kernel's name (`rx-gro`, `rx-checksum`, `tx-scatter-gather`), through ethtool netlink; one the device cannot change is refused naming it; set back at detach.", `"features": {"rx-gro": false}`},
	{"privateFlags", "{name: bool}", "The driver's ethtool private flags; one it does not have is refused naming it; set back at detach.", `"privateFlags": {"legacy-rx": true}`},
	{"ebpfPrograms", "bool", "false: netdra's eBPF programs are not put on the device (no counters; a host or dummy device's vlan and spoofChk then refused).", `"ebpfPrograms": false`},
}

func sysctlList() string {
	keys := sortedKeys(Sysctls)
	for i, k := range keys {
		r := Sysctls[k]
		keys[i] = fmt.Sprintf("`%s` (%d..%d)", k, r.min, r.max)
	}
	return strings.Join(keys, ", ")
}

// Markdown is Reference as a Markdown table, docs/claims.md's claim reference.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| parameter | takes | what it does | example |\n|---|---|---|---|\n")
	for _, p := range Reference {
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` |\n", p.Name, p.Type, p.Doc, p.Example)
	}
	return b.String()
}

// documentedNames is every parameter name Reference must have: the keys
// of the parameters and of their sub-objects ("routes[].table").
func documentedNames() []string {
	var names []string
	for k, sub := range paramsKeys {
		names = append(names, k)
		if _, isMap := sub[anyKey]; isMap || sub == nil {
			continue
		}
		sep := "[]."
		if k == "vrf" {
			sep = "."
		}
		for s := range sub {
			names = append(names, k+sep+s)
		}
	}
	slices.Sort(names)
	return names
}
