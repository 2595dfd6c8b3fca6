package hostdev

import "errors"

// Sentinel errors of Setup.
var (
	// ErrLinkNotFound means the device's interface is not in the host
	// network namespace.
	ErrLinkNotFound = errors.New("interface not found in the host netns")

	// ErrDefaultRoute means a default route of the host goes through the
	// interface (it holds one, or is a port or lower link of one that does):
	// handing it to a pod would cut the node off, so it is never offered.
	ErrDefaultRoute = errors.New("a default route of the host goes through the interface")

	// ErrNotSelected means the interface is not one the configuration
	// selects (any more): not in ifNames, another driver or IDs, or the
	// loopback.
	ErrNotSelected = errors.New("interface not selected by the host manager's configuration")
)
