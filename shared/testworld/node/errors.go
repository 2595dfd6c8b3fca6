package node

import "errors"

var (
	// ErrConfig means Start was given an unusable Config.
	ErrConfig = errors.New("invalid node config")
	// ErrDriverNotRegistered means a claim needs a DRA driver that has no
	// plugin registered on the node (yet).
	ErrDriverNotRegistered = errors.New("DRA driver is not registered")
	// ErrClaimNotUsable means a claim is not allocated, not reserved for the
	// pod, or not the pod's own generated claim.
	ErrClaimNotUsable = errors.New("resource claim not usable")
)
