package sockkeep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Taken is what a Take handed over.
type Taken struct {
	// Listeners are the held sockets by path: each is this process's
	// duplicate, and closing it leaves the holder's socket (and its
	// file) as it is.
	Listeners map[string]net.Listener
	// Inherited says every socket was held before this Take.
	Inherited bool
	// Registered says the kubelet registered the plugin behind these
	// very sockets (MarkRegistered) since they were created.
	Registered bool
}

// Close closes the listeners not used.
func (t *Taken) Close() {
	for _, l := range t.Listeners {
		l.Close()
	}
}

// Take asks the holder at handover for the listening sockets at paths
// (OpTake; renew creates them anew). It waits for the holder to listen
// until ctx ends, calling waiting (when not nil) with the error of each
// failed attempt to reach it.
func Take(ctx context.Context, handover string, paths []string, renew bool, waiting func(error)) (*Taken, error) {
	req := Request{Op: OpTake, Paths: paths, Renew: renew}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	reply, fds, err := exchange(ctx, handover, req, waiting)
	if err != nil {
		return nil, err
	}
	if len(fds) != len(paths) || len(reply.Inherited) != len(paths) {
		closeFDs(fds)
		return nil, fmt.Errorf("socket holder %s handed over %d sockets for %d paths", handover, len(fds), len(paths))
	}
	t := &Taken{Listeners: map[string]net.Listener{}, Inherited: true, Registered: reply.Registered}
	for i, p := range paths {
		f := os.NewFile(uintptr(fds[i]), p)
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			closeFDs(fds[i+1:])
			t.Close()
			return nil, fmt.Errorf("socket %s from the holder: %w", p, err)
		}
		t.Listeners[p] = l
		t.Inherited = t.Inherited && reply.Inherited[i]
	}
	return t, nil
}

// MarkRegistered tells the holder at handover that the kubelet registered
// the plugin behind the held sockets at paths (OpRegistered).
func MarkRegistered(ctx context.Context, handover string, paths []string) error {
	req := Request{Op: OpRegistered, Paths: paths}
	if err := req.Validate(); err != nil {
		return err
	}
	_, fds, err := exchange(ctx, handover, req, nil)
	closeFDs(fds)
	return err
}

// Held asks the holder at handover which sockets it holds (OpHeld), once:
// an error means the holder did not answer, or refused the caller.
func Held(ctx context.Context, handover string) ([]string, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", handover)
	if err != nil {
		return nil, fmt.Errorf("socket holder %s: %w", handover, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	reply, fds, err := roundTrip(conn.(*net.UnixConn), Request{Op: OpHeld})
	closeFDs(fds)
	if err != nil {
		return nil, err
	}
	return reply.Held, nil
}

// retryInterval is the pause between two attempts to reach the holder.
const retryInterval = 200 * time.Millisecond

// exchange sends req and reads the reply and its descriptors, dialing
// again while the holder is not there (not yet started) until ctx ends.
func exchange(ctx context.Context, handover string, req Request, waiting func(error)) (Reply, []int, error) {
	var (
		d       net.Dialer
		conn    net.Conn
		dialErr error
	)
	err := wait.Backoff{Duration: retryInterval}.DelayFunc().Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		if conn, dialErr = d.DialContext(ctx, "unix", handover); dialErr == nil {
			return true, nil
		}
		if waiting != nil {
			waiting(dialErr)
		}
		return false, nil
	})
	if err != nil {
		return Reply{}, nil, fmt.Errorf("socket holder %s: %w (last: %v)", handover, err, dialErr)
	}
	defer conn.Close()
	return roundTrip(conn.(*net.UnixConn), req)
}

func roundTrip(conn *net.UnixConn, req Request) (Reply, []int, error) {
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	data, err := json.Marshal(req)
	if err != nil {
		return Reply{}, nil, err
	}
	if _, err := conn.Write(append(data, '\n')); err != nil {
		return Reply{}, nil, fmt.Errorf("socket holder: sending the request: %w", err)
	}
	var (
		buf   []byte
		fds   []int
		chunk = make([]byte, 4096)
		oob   = make([]byte, unix.CmsgSpace(maxPaths*4))
	)
	for !bytes.HasSuffix(buf, []byte{'\n'}) {
		n, oobn, _, _, err := conn.ReadMsgUnix(chunk, oob)
		if oobn > 0 {
			got, perr := parseRights(oob[:oobn])
			fds = append(fds, got...)
			if perr != nil {
				closeFDs(fds)
				return Reply{}, nil, perr
			}
		}
		buf = append(buf, chunk[:n]...)
		if err != nil {
			closeFDs(fds)
			return Reply{}, nil, fmt.Errorf("socket holder: reading the reply: %w", err)
		}
	}
	var reply Reply
	if err := json.Unmarshal(buf, &reply); err != nil {
		closeFDs(fds)
		return Reply{}, nil, fmt.Errorf("socket holder: reply: %w", err)
	}
	if reply.Error != "" {
		closeFDs(fds)
		return Reply{}, nil, fmt.Errorf("socket holder: %s", reply.Error)
	}
	return reply, fds, nil
}

// parseRights returns the descriptors of the SCM_RIGHTS messages in oob.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("socket holder: control message: %w", err)
	}
	var fds []int
	var errs []error
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fds = append(fds, got...)
	}
	return fds, errors.Join(errs...)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
