package rpc

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OutcomeUnknown reports whether a failed call may still have done its
// work: its reply was lost (the connection broke, the deadline passed, the
// caller gave up), not refused by the server. A caller that rolls back
// must then undo the call as if it had succeeded; the call must be
// idempotent to undo.
func OutcomeUnknown(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
