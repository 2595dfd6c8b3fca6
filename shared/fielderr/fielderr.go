// Package fielderr is the one error type for a bad value in a request: it
// names the field as the API spells it in JSON ("allocations[0].pool",
// "config.vlanQoS") and the reason. Every service returns it for bad input;
// gRPC answers it as InvalidArgument with a BadRequest detail, by itself.
package fielderr

import (
	"errors"
	"fmt"
	"unicode/utf8"

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

// MaxText bounds what an error repeats of a request: a field or a reason
// longer than MaxText bytes (a 1 MiB value quoted back) is cut, so that a
// bad request makes neither the answer nor each log line of it as large
// as itself.
const MaxText = 1024

// clip cuts s to MaxText bytes at a character boundary, saying how long it
// was.
func clip(s string) string {
	if len(s) <= MaxText {
		return s
	}
	cut := MaxText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:cut], len(s))
}

func (e *Error) Error() string { return clip(e.Field) + ": " + clip(e.Reason) }

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// GRPCStatus makes gRPC answer the error as InvalidArgument with a
// BadRequest field violation.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(codes.InvalidArgument, e.Error())
	d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: clip(e.Field), Description: clip(e.Reason)}}})
	if err != nil {
		return st
	}
	return d
}
