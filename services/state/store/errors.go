package store

import (
	"errors"

	"github.com/netdra/netdra/shared/fielderr"
)

// Sentinel errors of the store. The gRPC layer maps them to status codes.
var (
	// ErrNotFound: the allocation does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the write would give a device to two claims, or a device
	// name to two managers.
	ErrConflict = errors.New("conflict")
	// ErrPhase: the allocation is not in a phase that allows the write.
	ErrPhase = errors.New("wrong phase")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
)

// fieldErr is a bad value in a request (a *fielderr.Error, answered as
// InvalidArgument).
var fieldErr = fielderr.New
