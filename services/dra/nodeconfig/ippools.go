package nodeconfig

import (
	"fmt"
	"math"
	"strings"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// IPPools is the state service's request for the spec's address pools.
func IPPools(spec *v1alpha1.NodeConfigSpec) *statev1.ReplaceIPPoolsRequest {
	req := &statev1.ReplaceIPPoolsRequest{}
	for _, p := range spec.IPPools {
		out := &statev1.IPPool{Name: p.Name, Subnet: p.Subnet, RangeStart: p.RangeStart, RangeEnd: p.RangeEnd,
			Gateway: p.Gateway, Exclude: p.Exclude}
		for _, r := range p.Routes {
			out.Routes = append(out.Routes, &devicev1.Route{Destination: r.Destination, Gateway: r.Gateway})
		}
		req.Pools = append(req.Pools, out)
	}
	return req
}

// IPPoolsDraining describes the pools that were removed or shrunk while
// addresses of them are in use ("" when none): they keep those addresses
// until the claims holding them are unprepared.
func IPPoolsDraining(pools []*statev1.IPPoolStatus) string {
	var parts []string
	for _, p := range pools {
		switch {
		case p.GetRetired():
			parts = append(parts, fmt.Sprintf("ip pool %q was removed but %d of its addresses are in use", p.GetPool().GetName(), p.GetUsed()))
		case p.GetOutOfRange() > 0:
			parts = append(parts, fmt.Sprintf("ip pool %q has %d addresses in use outside its range", p.GetPool().GetName(), p.GetOutOfRange()))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + "; they are kept until their claims are unprepared"
}

// IPPoolUsage is the NodeConfig status's count of each configured pool
// (retired ones left out), in the state service's order.
func IPPoolUsage(pools []*statev1.IPPoolStatus) []v1alpha1.IPPoolUsage {
	var out []v1alpha1.IPPoolUsage
	for _, p := range pools {
		if p.GetRetired() {
			continue
		}
		out = append(out, v1alpha1.IPPoolUsage{Name: p.GetPool().GetName(), RangeStart: p.GetPool().GetRangeStart(),
			RangeEnd: p.GetPool().GetRangeEnd(), Size: p.GetSize(), Used: int32(min(p.GetUsed(), math.MaxInt32)), Free: p.GetFree()})
	}
	return out
}

// ExhaustedIPPools are the names of the configured pools (retired ones
// left out) with no free address, in the state service's order.
func ExhaustedIPPools(pools []*statev1.IPPoolStatus) []string {
	var out []string
	for _, p := range pools {
		if !p.GetRetired() && p.GetFree() == "0" {
			out = append(out, p.GetPool().GetName())
		}
	}
	return out
}
