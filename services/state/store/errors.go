package store

import (
	"errors"
	"fmt"
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

// FieldError is a bad value in a request, naming the field as the API
// spells it in JSON (allocations[2].claimUid).
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Reason) }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
