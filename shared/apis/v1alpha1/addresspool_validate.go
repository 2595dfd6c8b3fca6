package v1alpha1

import (
	"fmt"
	"net/netip"

	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/ippool"
)

// ValidateClusterConfig checks spec as the CRD does, plus what CEL cannot
// say: spec.spec by Validate, and the address pools (each valid, names
// unique and apart from spec.ipPools', subnets disjoint from each other and
// from spec.ipPools' ranges, no more pools in a generated NodeConfig than
// it holds). It returns nil or a *fielderr.Error naming the first bad
// field relative to spec ("addressPools[1].blockPrefixLength",
// "spec.ipPools[0].name"). A nil spec is valid.
func ValidateClusterConfig(spec *ClusterConfigSpec) error {
	if spec == nil {
		return nil
	}
	if err := fielderr.Prefix("spec", Validate(&spec.Spec)); err != nil {
		return err
	}
	return ValidateAddressPools(spec)
}

// ValidateAddressPools is ValidateClusterConfig's check of spec's address
// pools alone, whatever spec.spec holds. A nil spec is valid.
func ValidateAddressPools(spec *ClusterConfigSpec) error {
	if spec == nil {
		return nil
	}
	if len(spec.AddressPools) > MaxAddressPools {
		return fielderr.New("addressPools", "%d pools, more than %d", len(spec.AddressPools), MaxAddressPools)
	}
	if n := len(spec.AddressPools) + len(spec.Spec.IPPools); n > ippool.MaxPools {
		return fielderr.New("addressPools", "%d address pools and %d ipPools: a NodeConfig holds at most %d pools", len(spec.AddressPools), len(spec.Spec.IPPools), ippool.MaxPools)
	}
	var subnets []netip.Prefix
	for i := range spec.AddressPools {
		f := fmt.Sprintf("addressPools[%d]", i)
		sub, err := ValidateAddressPool(&spec.AddressPools[i])
		if err != nil {
			return fielderr.Prefix(f, err)
		}
		if err := checkApart(f, spec, i, sub, subnets); err != nil {
			return err
		}
		subnets = append(subnets, sub)
	}
	return nil
}

// checkApart refuses address pool i when its name is taken or its subnet
// overlaps an earlier pool's subnet or a node-local pool's range.
func checkApart(f string, spec *ClusterConfigSpec, i int, sub netip.Prefix, subnets []netip.Prefix) error {
	name := spec.AddressPools[i].Name
	for j := range i {
		if spec.AddressPools[j].Name == name {
			return fielderr.New(f+".name", "%q is also the name of addressPools[%d]: pool names are unique", name, j)
		}
		if subnets[j].Overlaps(sub) {
			return fielderr.New(f+".subnet", "%s overlaps addressPools[%d]'s %s", sub, j, subnets[j])
		}
	}
	for j, p := range spec.Spec.IPPools {
		if p.Name == name {
			return fielderr.New(f+".name", "%q is also the name of spec.ipPools[%d]: pool names are unique", name, j)
		}
		local, err := ippool.Parse(IPPoolSpecs(spec.Spec.IPPools[j : j+1])[0])
		if err != nil {
			continue // Validate refused it already
		}
		if local.Is4() == sub.Addr().Is4() && local.Start.Compare(ippool.LastAddr(sub)) <= 0 && sub.Addr().Compare(local.End) <= 0 {
			return fielderr.New(f+".subnet", "%s overlaps the range %s-%s of spec.ipPools[%d]: an address belongs to one pool", sub, local.Start, local.End, j)
		}
	}
	return nil
}

// ValidateAddressPool checks one address pool and returns its subnet.
// Fields are relative to the pool ("blockPrefixLength", "routes[0].gateway").
func ValidateAddressPool(p *AddressPool) (netip.Prefix, error) {
	if err := checkPoolName(p.Name); err != "" {
		return netip.Prefix{}, fielderr.New("name", "%s", err)
	}
	sub, err := netip.ParsePrefix(p.Subnet)
	if err != nil || sub != sub.Masked() || sub.Addr().Is4In6() {
		return netip.Prefix{}, fielderr.New("subnet", "%q is not a CIDR without host bits (10.0.0.0/16)", p.Subnet)
	}
	if b := int(p.BlockPrefixLength); b <= sub.Bits() || b > sub.Addr().BitLen() {
		return netip.Prefix{}, fielderr.New("blockPrefixLength", "%d is out of range %d..%d: longer than the subnet's prefix, at most the address length",
			p.BlockPrefixLength, sub.Bits()+1, sub.Addr().BitLen())
	}
	if p.MinFreeAddresses != nil && *p.MinFreeAddresses < 1 {
		return netip.Prefix{}, fielderr.New("minFreeAddresses", "%d is less than 1", *p.MinFreeAddresses)
	}
	if p.MaxBlocksPerNode < 0 || p.MaxBlocksPerNode > MaxBlocksPerNode {
		return netip.Prefix{}, fielderr.New("maxBlocksPerNode", "%d is out of range 1..%d", p.MaxBlocksPerNode, MaxBlocksPerNode)
	}
	if len(p.Exclude) > 16 {
		return netip.Prefix{}, fielderr.New("exclude", "%d entries, more than 16", len(p.Exclude))
	}
	whole := IPPool{Name: p.Name, Subnet: p.Subnet, Gateway: p.Gateway, Routes: p.Routes, Exclude: p.Exclude}
	if _, err := ippool.Parse(IPPoolSpecs([]IPPool{whole})[0]); err != nil {
		return netip.Prefix{}, err
	}
	return sub, nil
}
