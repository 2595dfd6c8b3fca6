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
)
