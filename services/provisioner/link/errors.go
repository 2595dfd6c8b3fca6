package link

import "errors"

var (
	// ErrNameClash means the name a link must take is held by a different
	// link in that network namespace (the pod's for Attach, the host's for
	// Detach).
	ErrNameClash = errors.New("interface name already in use")

	// ErrLinkNotFound means the link is in neither the host nor the pod
	// network namespace under the expected name.
	ErrLinkNotFound = errors.New("link not found")

	// ErrHostNetns means the pod network namespace is the host's own.
	ErrHostNetns = errors.New("netns is the host netns")

	// ErrLinkLost means Detach found the pod network namespace gone and the
	// link nowhere in the host: a virtual link (veth) the kernel destroyed
	// with its namespace. Detach is then done (there is nothing to take
	// back), but the device is lost and the caller should say so.
	ErrLinkLost = errors.New("link lost with its network namespace")

	// ErrRDMANotFound means an RDMA device is in neither the host nor the
	// pod network namespace (exclusive RDMA netns mode).
	ErrRDMANotFound = errors.New("RDMA device not found")

	// ErrRDMANotMovable means the kernel refused to move an RDMA device to
	// another network namespace (EOPNOTSUPP): its driver cannot disassociate
	// the user contexts open on it, as soft-RoCE (rdma_rxe) cannot, so in
	// the exclusive RDMA netns mode no pod can have it.
	ErrRDMANotMovable = errors.New("RDMA device cannot change network namespace")

	// ErrNoLease means no DHCP server gave the interface a lease within
	// DHCPTimeout: Attach fails, with nothing left configured.
	ErrNoLease = errors.New("no DHCP lease")
)
