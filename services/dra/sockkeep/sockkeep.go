// Package sockkeep keeps dra's kubelet sockets listening while dra
// restarts, as systemd's socket activation does: a holder process that
// does not restart with dra creates the listening sockets (the DRA
// plugin's socket and the kubelet registration socket) and hands a
// duplicate of each to every dra that asks, over a unix socket with
// SCM_RIGHTS. A connection the kubelet makes while dra is away waits in
// the socket's backlog until the next dra accepts it, and the socket
// files never leave the kubelet's directories, so its plugin watcher sees
// no deregistration.
//
// The exchange is one JSON line each way on a connection to the holder's
// handover socket: a Request, and a Reply carrying, for Take, one
// listening file descriptor per requested path in the request's order.
package sockkeep

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Ops of a Request.
const (
	// OpTake asks for the listening sockets at Paths: those already held
	// are handed over as they are (their backlog kept), the others are
	// created; held sockets not in Paths are closed and removed (the
	// driver was renamed). With Renew every socket in Paths is created
	// anew first, so that the kubelet's plugin watcher sees it again.
	OpTake = "take"
	// OpRegistered records that the kubelet registered the plugin behind
	// the held sockets at Paths; a later Take of the same sockets reports
	// it until they are created anew.
	OpRegistered = "registered"
	// OpHeld asks which sockets are held, and changes nothing: the
	// holder's health check. Paths must be empty.
	OpHeld = "held"
)

// Request is what a client sends, one JSON object on one line.
type Request struct {
	Op    string   `json:"op"`
	Paths []string `json:"paths"`
	Renew bool     `json:"renew,omitempty"`
}

// Reply is the holder's answer, one JSON object on one line; for a Take
// without Error it comes with one file descriptor per requested path.
type Reply struct {
	// Error, when set, says why the request was refused; nothing was
	// handed over.
	Error string `json:"error,omitempty"`
	// Inherited says, per requested path, that the socket was held
	// already (a previous client had it) rather than created now.
	Inherited []bool `json:"inherited,omitempty"`
	// Registered says every requested socket was inherited and the
	// kubelet registered the plugin behind them (OpRegistered) since
	// they were created.
	Registered bool `json:"registered,omitempty"`
	// Held are the paths held, sorted, for OpHeld.
	Held []string `json:"held,omitempty"`
}

// maxSocketPath is the longest path a unix socket address holds.
var maxSocketPath = len(unix.RawSockaddrUnix{}.Path)

// maxPaths bounds a request: dra asks for two sockets.
const maxPaths = 8

// Validate checks a request; the error names the field at fault.
func (r *Request) Validate() error {
	switch r.Op {
	case OpTake, OpRegistered:
	case OpHeld:
		if len(r.Paths) > 0 {
			return fmt.Errorf("paths: %d given, %q takes none", len(r.Paths), OpHeld)
		}
		return nil
	default:
		return fmt.Errorf("op: %q is not %q, %q or %q", r.Op, OpTake, OpRegistered, OpHeld)
	}
	if len(r.Paths) == 0 && r.Op == OpRegistered {
		return errors.New("paths: empty")
	}
	if len(r.Paths) > maxPaths {
		return fmt.Errorf("paths: %d, at most %d", len(r.Paths), maxPaths)
	}
	seen := map[string]bool{}
	for i, p := range r.Paths {
		switch {
		case !filepath.IsAbs(p) || filepath.Clean(p) != p:
			return fmt.Errorf("paths[%d]: %q is not a clean absolute path", i, p)
		case len(p) >= maxSocketPath:
			return fmt.Errorf("paths[%d]: %q is %d bytes, over the %d-byte limit of a unix socket address", i, p, len(p), maxSocketPath-1)
		case seen[p]:
			return fmt.Errorf("paths[%d]: %q given twice", i, p)
		}
		seen[p] = true
	}
	return nil
}
