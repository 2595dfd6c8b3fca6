package v1alpha1

import "github.com/netdra/netdra/shared/ippool"

// IPPool is a node-local address pool, like the CNI host-local IPAM of the
// SR-IOV CNI: a claim whose config names it (ipPools) gets the next free
// address of its range, kept by the state service until the claim is
// unprepared. Validate checks what CEL cannot (the range's order, the
// gateway outside an explicit range, disjoint ranges).
//
// +kubebuilder:validation:XValidation:rule="!has(self.rangeStart) || cidr(self.subnet).containsIP(self.rangeStart)",message="rangeStart must be inside subnet",fieldPath=".rangeStart"
// +kubebuilder:validation:XValidation:rule="!has(self.rangeEnd) || cidr(self.subnet).containsIP(self.rangeEnd)",message="rangeEnd must be inside subnet",fieldPath=".rangeEnd"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || cidr(self.subnet).containsIP(self.gateway)",message="gateway must be inside subnet",fieldPath=".gateway"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || ((!has(self.rangeStart) || self.gateway != self.rangeStart) && (!has(self.rangeEnd) || self.gateway != self.rangeEnd))",message="the gateway must be outside the range",fieldPath=".gateway"
// +kubebuilder:validation:XValidation:rule="!has(self.exclude) || self.exclude.all(x, isIP(x) ? cidr(self.subnet).containsIP(x) : cidr(self.subnet).containsCIDR(x))",message="excluded addresses must be inside subnet",fieldPath=".exclude"
type IPPool struct {
	// Name is what claim configs name in ipPools: lower-case letters,
	// digits, '-' and '.'.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`
	Name string `json:"name"`

	// Subnet is the pool's network in CIDR form, IPv4 or IPv6, without host
	// bits; the addresses get its prefix length.
	//
	// +required
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self) == cidr(self).masked()",message="subnet must be a CIDR without host bits (10.0.0.0/24)"
	Subnet string `json:"subnet"`

	// RangeStart and RangeEnd bound the addresses handed out; by default
	// the subnet's first and last host addresses.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="rangeStart must be an IP address"
	RangeStart string `json:"rangeStart,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="rangeEnd must be an IP address"
	RangeEnd string `json:"rangeEnd,omitempty"`

	// Gateway is never handed out, and is the next hop of routes that name
	// none.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="gateway must be an IP address"
	Gateway string `json:"gateway,omitempty"`

	// Routes are added in the pod with the address.
	//
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Routes []IPPoolRoute `json:"routes,omitempty"`

	// Exclude lists addresses or CIDRs never handed out.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isIP(self) || isCIDR(self)",message="an excluded entry is an IP address or a CIDR"
	Exclude []string `json:"exclude,omitempty"`
}

// IPPoolRoute is a route added with a pool's address.
type IPPoolRoute struct {
	// Destination in CIDR form (0.0.0.0/0 for a default route).
	//
	// +required
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="destination must be a CIDR"
	Destination string `json:"destination"`
	// Gateway is the next hop; the pool's gateway when unset.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="gateway must be an IP address"
	Gateway string `json:"gateway,omitempty"`
}

// IPPoolSpecs converts pools for package ippool.
func IPPoolSpecs(pools []IPPool) []ippool.Spec {
	out := make([]ippool.Spec, len(pools))
	for i, p := range pools {
		out[i] = ippool.Spec{Name: p.Name, Subnet: p.Subnet, RangeStart: p.RangeStart, RangeEnd: p.RangeEnd,
			Gateway: p.Gateway, Exclude: p.Exclude}
		for _, r := range p.Routes {
			out[i].Routes = append(out[i].Routes, ippool.RouteSpec{Destination: r.Destination, Gateway: r.Gateway})
		}
	}
	return out
}
