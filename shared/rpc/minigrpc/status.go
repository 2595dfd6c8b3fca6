package minigrpc

import (
	"fmt"
	"strconv"
)

// Code is a gRPC status code, numbered as in google.golang.org/grpc/codes.
type Code uint32

// The gRPC status codes.
const (
	OK Code = iota
	Canceled
	Unknown
	InvalidArgument
	DeadlineExceeded
	NotFound
	AlreadyExists
	PermissionDenied
	ResourceExhausted
	FailedPrecondition
	Aborted
	OutOfRange
	Unimplemented
	Internal
	Unavailable
	DataLoss
	Unauthenticated
)

var codeNames = [...]string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
	"Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}

// String is the code's name, as grpc-go's codes.Code says it.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// Status is a call's outcome when it is not OK: the server's grpc-status
// and grpc-message (percent-decoded), or the client's own, as grpc-go's
// client would give it (Unavailable for a lost connection,
// DeadlineExceeded when the call's time ran out).
type Status struct {
	Code    Code
	Message string
}

// Error reads as a grpc-go status error does.
func (s *Status) Error() string {
	return fmt.Sprintf("rpc error: code = %s desc = %s", s.Code, s.Message)
}

func statusf(c Code, format string, args ...any) *Status {
	return &Status{Code: c, Message: fmt.Sprintf(format, args...)}
}

// decodeMessage undoes grpc-message's percent-encoding. A malformed
// escape is kept as it is, as grpc-go does.
func decodeMessage(s string) string {
	i := 0
	for i < len(s) && s[i] != '%' {
		i++
	}
	if i == len(s) {
		return s
	}
	b := make([]byte, 0, len(s))
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// httpStatusCode is the gRPC code grpc-go gives a response whose HTTP
// status is not 200 and that has no grpc-status.
func httpStatusCode(status int) Code {
	switch status {
	case 400:
		return Internal
	case 401:
		return Unauthenticated
	case 403:
		return PermissionDenied
	case 404:
		return Unimplemented
	case 429, 502, 503, 504:
		return Unavailable
	}
	return Unknown
}

// rstStreamCode is the gRPC code of an HTTP/2 RST_STREAM error code, as
// grpc-go maps them.
func rstStreamCode(errCode uint32) Code {
	switch errCode {
	case 0x3: // FLOW_CONTROL_ERROR
		return ResourceExhausted
	case 0x7: // REFUSED_STREAM
		return Unavailable
	case 0x8: // CANCEL
		return Canceled
	case 0xb: // ENHANCE_YOUR_CALM
		return ResourceExhausted
	case 0xc: // INADEQUATE_SECURITY
		return PermissionDenied
	}
	return Internal
}
