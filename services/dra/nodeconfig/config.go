package nodeconfig

import (
	"slices"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// Provisioner is the provisioner configuration of spec: its managers and
// the sysfs root they read ("" leaves the provisioner's own default).
func Provisioner(spec *v1alpha1.NodeConfigSpec) *provisionerv1.ConfigureRequest {
	return &provisionerv1.ConfigureRequest{Managers: Managers(spec), SysfsRoot: spec.SysfsRoot}
}

// Managers is the device manager configuration of spec.
func Managers(spec *v1alpha1.NodeConfigSpec) *provisionerv1.ManagerConfigs {
	m := spec.DeviceManagerConfigs
	out := &provisionerv1.ManagerConfigs{}
	if m == nil {
		return out
	}
	if c := m.SRIOV; c != nil {
		out.Sriov = &provisionerv1.SriovConfig{Enabled: c.Enabled, SysBusPciDevPath: c.SysBusPCIDevPath}
		for _, i := range c.Ifaces {
			out.Sriov.Ifaces = append(out.Sriov.Ifaces, &provisionerv1.SriovInterface{IfName: i.IfName, VfCount: uint32(max(i.VFCount, 0))})
		}
	}
	if c := m.Dummy; c != nil {
		out.Dummy = &provisionerv1.DummyConfig{Enabled: c.Enabled, Count: uint32(max(c.Count, 0))}
	}
	if c := m.Subif; c != nil {
		out.Subif = subif(c)
	}
	if c := m.Host; c != nil {
		out.Host = &provisionerv1.HostConfig{Enabled: c.Enabled, IfNames: c.IfNames, Drivers: c.Drivers,
			VendorIds: c.VendorIDs, DeviceIds: c.DeviceIDs}
		for _, p := range spec.Pools {
			if p.KeepEBPFPrograms {
				out.Host.KeepEbpfProgramsPools = append(out.Host.KeepEbpfProgramsPools, p.Name)
			}
		}
	}
	return out
}

// Pools is the pool configuration of spec.
func Pools(spec *v1alpha1.NodeConfigSpec) []publish.Spec {
	var out []publish.Spec
	for _, p := range spec.Pools {
		s := publish.Spec{Name: p.Name, TaintEffect: string(p.UnhealthyTaintEffect), MultusResourceName: p.MultusResourceName,
			IPPools: slices.Clone(p.IPPools)}
		if f := p.Filter; f != nil {
			for _, m := range f.DeviceManagers {
				s.Filter.DeviceManagers = append(s.Filter.DeviceManagers, string(m))
			}
			s.Filter.PFNames, s.Filter.PCIAddrs, s.Filter.VendorIDs = f.PFNames, f.PCIAddrs, f.VendorIDs
			s.Filter.DeviceIDs, s.Filter.Drivers, s.Filter.IfNames, s.Filter.ParentIfNames = f.DeviceIDs, f.Drivers, f.IfNames, f.ParentIfNames
		}
		out = append(out, s)
	}
	return out
}
