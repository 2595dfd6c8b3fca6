// Package minigrpc is a unary gRPC client for a unix socket, small enough
// for a program that must start fast: it links the standard library and
// golang.org/x/net/http2/hpack only (no grpc-go, no net/http, no protobuf
// runtime), so its package init costs next to nothing. netdra's OCI hook
// binary (netdra-hook) calls nri's gate socket with it; every netdra socket
// stays a real gRPC server.
//
// A [Call] is one HTTP/2 connection and one stream: the client preface and
// SETTINGS, the request's HEADERS and DATA (within the server's flow-control
// windows), then the server's frames until the stream ends; SETTINGS and
// PING are acknowledged, WINDOW_UPDATE, GOAWAY, RST_STREAM and CONTINUATION
// handled. The caller encodes the request message and decodes the
// response's itself. A call that fails is a [*Status] that reads as
// grpc-go's client would give it.
package minigrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// maxMessageSize bounds the response message, as grpc-go's default
// MaxCallRecvMsgSize does.
const maxMessageSize = 4 << 20

// Backoff between attempts to reach a server that is not there (yet):
// rpc.Dial's.
const (
	baseDelay = 50 * time.Millisecond
	maxDelay  = 2 * time.Second
)

// errUnprocessed is an attempt the server did not take: nothing listened,
// the connection ended before the server's SETTINGS, or the server refused
// the stream (GOAWAY below it, REFUSED_STREAM). The call is tried again on
// a new connection, as grpc-go's WaitForReady and transparent retry do.
var errUnprocessed = errors.New("the server did not take the call")

// Call calls method ("/package.Service/Method") on the gRPC server at the
// unix socket with the encoded request message req, and returns the encoded
// response message. It waits for a server that is not listening yet, or
// that went away before taking the call, until ctx ends (grpc-go's
// WaitForReady); its deadline is sent as grpc-timeout and bounds every read
// and write. The error is a *Status: the server's, or DeadlineExceeded or
// Canceled when ctx ended, Unavailable when the connection was lost
// mid-call, Internal for a malformed response.
func Call(ctx context.Context, socket, method string, req []byte) ([]byte, error) {
	delay := baseDelay
	for {
		resp, err := attempt(ctx, socket, method, req)
		if !errors.Is(err, errUnprocessed) {
			return resp, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, contextStatus(ctx.Err())
		case <-t.C:
		}
		delay = min(delay*8/5, maxDelay)
	}
}

// attempt is one connection's try at the call.
func attempt(ctx context.Context, socket, method string, req []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextStatus(err)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if ctx.Err() != nil {
			return nil, contextStatus(ctx.Err())
		}
		return nil, fmt.Errorf("%w: %w", errUnprocessed, err)
	}
	defer nc.Close()
	deadline, _ := ctx.Deadline()
	if err := nc.SetDeadline(deadline); err != nil {
		return nil, statusf(Unavailable, "connection error: %v", err)
	}
	// A cancelled ctx ends the reads and writes at once.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	resp, err := newConn(nc).roundTrip(method, deadline, req)
	var st *Status
	switch {
	case errors.As(err, &st) && st.Code == Canceled && !deadline.IsZero() && time.Until(deadline) < serverTimerSlack:
		// The server's timer for the grpc-timeout sent, which reset the
		// stream (CANCEL), fired before ctx's: the deadline, as grpc-go's
		// client sees it.
		<-ctx.Done()
		return nil, contextStatus(ctx.Err())
	case !errors.Is(err, os.ErrDeadlineExceeded):
		return resp, err
	default:
		// The socket's deadline is ctx's, which its timer marks a moment
		// later: wait for it, so that the caller sees ctx ended too.
		<-ctx.Done()
		return nil, contextStatus(ctx.Err())
	}
}

// serverTimerSlack is how early before ctx's deadline a server's reset
// of the stream counts as its timer for the grpc-timeout: the timeout is
// sent rounded, and timers fire late on a loaded machine.
const serverTimerSlack = 100 * time.Millisecond

// contextStatus is the status of a call whose ctx ended, as grpc-go gives it.
func contextStatus(err error) *Status {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Status{Code: DeadlineExceeded, Message: err.Error()}
	}
	return &Status{Code: Canceled, Message: err.Error()}
}
