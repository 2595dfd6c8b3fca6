package sriov

import "errors"

var (
	// ErrPFNotFound means a physical function's interface does not exist
	// (in sysfs for provisioning, in netlink for VF settings).
	ErrPFNotFound = errors.New("physical function not found")

	// ErrNotSriov means a PF's PCI device has no SR-IOV capability
	// (no sriov_totalvfs).
	ErrNotSriov = errors.New("device is not SR-IOV capable")

	// ErrTooManyVFs means a configured VF count is more than the PF
	// supports (sriov_totalvfs).
	ErrTooManyVFs = errors.New("more VFs than the device supports")

	// ErrNotVF means a device has no PF name or no VF index, so there is
	// no PF to configure it through.
	ErrNotVF = errors.New("device is not a VF with a known PF")

	// ErrVFNotFound means the PF reports no VF with the device's index
	// (the VFs were removed or re-created with a smaller count).
	ErrVFNotFound = errors.New("VF not found on its PF")

	// ErrNoIOMMUGroup means a VF bound to vfio-pci has no IOMMU group in
	// sysfs, so there is no vfio device node to give the pod.
	ErrNoIOMMUGroup = errors.New("no IOMMU group")
)
