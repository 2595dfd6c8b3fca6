// Package fielderr is the one error type for a bad value in a request: it
// names the field as the API spells it in JSON ("allocations[0].pool",
// "config.vlanQoS") and the reason. Every service returns it for bad input;
// gRPC answers it as InvalidArgument with a BadRequest detail, by itself.
package fielderr

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrInvalid is what every *Error unwraps to.
var ErrInvalid = errors.New("invalid argument")

// Error is a bad value in a request.
type Error struct {
	Field  string
	Reason string
}

// New returns an *Error for field with a formatted reason.
func New(field, format string, args ...any) error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Prefix returns err with its field put under parent ("config" + "mtu" is
// "config.mtu"); other errors are returned as they are.
func Prefix(parent string, err error) error {
	var fe *Error
	if parent == "" || !errors.As(err, &fe) {
		return err
	}
	return &Error{Field: parent + "." + fe.Field, Reason: fe.Reason}
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// GRPCStatus makes gRPC answer the error as InvalidArgument with a
// BadRequest field violation.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(codes.InvalidArgument, e.Error())
	d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: e.Field, Description: e.Reason}}})
	if err != nil {
		return st
	}
	return d
}
