package sockkeep

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/netdra/netdra/shared/rpc"
)

// Holder holds listening unix sockets and hands them over (package doc).
// It never accepts on them.
type Holder struct {
	log *slog.Logger
	// allowed are the peer uids a handover is given to; empty: the
	// holder's own uid and root.
	allowed []uint32

	mu   sync.Mutex
	held map[string]*held // by path
}

type held struct {
	ln         *net.UnixListener
	file       *os.File // a duplicate of ln's descriptor, the one handed over
	registered bool
	// created is the socket file as bound: release removes the file at
	// the path only while it is still this one.
	created os.FileInfo
}

// NewHolder returns a holder holding nothing. allowed are the peer uids it
// hands sockets to (empty: its own uid and root).
func NewHolder(log *slog.Logger, allowed []uint32) *Holder {
	return &Holder{log: log, allowed: allowed, held: map[string]*held{}}
}

// handshakeTimeout bounds one exchange with a client.
const handshakeTimeout = 10 * time.Second

// Serve answers clients on the handover socket at path until ctx ends,
// then closes the handover socket and removes it. The held sockets stay
// until Close.
func (h *Holder) Serve(ctx context.Context, path string) error {
	ln, err := h.listenHandover(ctx, path)
	if err != nil {
		return fmt.Errorf("handover socket: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	h.log.Info("Holding sockets for dra", "socket", path)
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			ln.Close()
			return fmt.Errorf("handover socket: %w", err)
		}
		go h.answer(conn.(*net.UnixConn))
	}
}

// handoverRetry is how often a holder whose handover socket another holder
// still serves tries it again.
const handoverRetry = time.Second

// listenHandover listens on the handover socket at path. While another
// holder answers there (rpc.ErrInUse: the holder pod being replaced has
// not exited yet), it waits for that one to go, until ctx ends: two
// holders never serve one path, and the one leaving removes only its own
// files (release).
func (h *Holder) listenHandover(ctx context.Context, path string) (net.Listener, error) {
	var ln net.Listener
	logged := false
	err := wait.PollUntilContextCancel(ctx, handoverRetry, true, func(context.Context) (bool, error) {
		var err error
		ln, err = rpc.Listen(path)
		if errors.Is(err, rpc.ErrInUse) {
			if !logged {
				h.log.Info("Waiting for the holder serving the handover socket to exit", "socket", path)
				logged = true
			}
			return false, nil
		}
		return err == nil, err
	})
	return ln, err
}

// Close closes every held socket and removes its file: the kubelet's
// plugin watcher then deregisters the plugin, as when dra itself stops.
func (h *Holder) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p := range h.held {
		h.releaseLocked(p)
	}
}

// Held returns the paths held, sorted.
func (h *Holder) Held() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.held))
	for p := range h.held {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func (h *Holder) answer(conn *net.UnixConn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	reply, files := h.handle(conn)
	data, _ := json.Marshal(reply)
	data = append(data, '\n')
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := conn.WriteMsgUnix(data, oob, nil); err != nil {
		h.log.Warn("Could not answer a handover request", "error", err)
	}
}

// handle reads and carries out one request from conn.
func (h *Holder) handle(conn *net.UnixConn) (Reply, []*os.File) {
	if err := h.admit(conn); err != nil {
		h.log.Warn("Refused a handover request", "error", err)
		return Reply{Error: err.Error()}, nil
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return Reply{Error: fmt.Sprintf("reading the request: %v", err)}, nil
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		return Reply{Error: fmt.Sprintf("request: %v", err)}, nil
	}
	if err := req.Validate(); err != nil {
		return Reply{Error: err.Error()}, nil
	}
	switch req.Op {
	case OpRegistered:
		return h.markRegistered(req.Paths)
	case OpHeld:
		return Reply{Held: h.Held()}, nil
	}
	return h.take(req.Paths, req.Renew)
}

// admit checks the peer's uid (SO_PEERCRED) against the allow-list.
func (h *Holder) admit(conn *net.UnixConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("peer credentials: %w", credErr)
	}
	allowed := h.allowed
	if len(allowed) == 0 {
		allowed = []uint32{0, uint32(os.Getuid())}
	}
	if !slices.Contains(allowed, cred.Uid) {
		return fmt.Errorf("peer uid %d (pid %d) is not allowed (allowed: %v)", cred.Uid, cred.Pid, allowed)
	}
	return nil
}

func (h *Holder) markRegistered(paths []string) (Reply, []*os.File) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range paths {
		if h.held[p] == nil {
			return Reply{Error: fmt.Sprintf("paths: %s is not held", p)}, nil
		}
	}
	for _, p := range paths {
		h.held[p].registered = true
	}
	return Reply{}, nil
}

// take hands over the sockets at paths, creating those not held (all of
// them with renew) and releasing the held ones not asked for. On an error
// the sockets it created are released again and the held ones it kept
// stay.
func (h *Holder) take(paths []string, renew bool) (Reply, []*os.File) {
	h.mu.Lock()
	defer h.mu.Unlock()
	reply := Reply{Inherited: make([]bool, len(paths)), Registered: len(paths) > 0}
	var created []string
	files := make([]*os.File, len(paths))
	for i, p := range paths {
		if renew && h.held[p] != nil {
			h.log.Info("Creating a held socket anew", "path", p)
			h.releaseLocked(p)
		}
		if hs := h.held[p]; hs != nil {
			reply.Inherited[i] = true
			reply.Registered = reply.Registered && hs.registered
			files[i] = hs.file
			continue
		}
		hs, err := listen(p)
		if err != nil {
			for _, c := range created {
				h.releaseLocked(c)
			}
			return Reply{Error: fmt.Sprintf("paths[%d]: %v", i, err)}, nil
		}
		h.held[p] = hs
		created = append(created, p)
		files[i] = hs.file
		reply.Registered = false
		h.log.Info("Holding a socket", "path", p)
	}
	for p := range h.held {
		if !slices.Contains(paths, p) {
			h.log.Info("Releasing a socket no longer asked for", "path", p)
			h.releaseLocked(p)
		}
	}
	return reply, files
}

// listen creates a listening socket at path (rpc.Listen: a stale file
// removed, a live one refused).
func listen(path string) (*held, error) {
	ln, err := rpc.Listen(path)
	if err != nil {
		return nil, err
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("listener of %s is a %T", path, ln)
	}
	// The file is removed by release, and only while it is this one.
	ul.SetUnlinkOnClose(false)
	fi, err := os.Lstat(path)
	if err != nil {
		ul.Close()
		return nil, err
	}
	f, err := ul.File()
	if err != nil {
		ul.Close()
		os.Remove(path)
		return nil, err
	}
	return &held{ln: ul, file: f, created: fi}, nil
}

// releaseLocked closes the held socket at p and removes its file, unless
// the file there is no longer the one it created: another holder's (one
// started while this one was leaving, which found this one's socket stale
// or gone) is left alone.
func (h *Holder) releaseLocked(p string) {
	hs := h.held[p]
	delete(h.held, p)
	err := errors.Join(hs.file.Close(), hs.ln.Close())
	if err != nil {
		h.log.Warn("Closing a held socket", "path", p, "error", err)
	}
	switch fi, err := os.Lstat(p); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		h.log.Warn("Removing a held socket", "path", p, "error", err)
	case !os.SameFile(fi, hs.created):
		h.log.Info("Left a socket file another holder made in place of this one's", "path", p)
	default:
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			h.log.Warn("Removing a held socket", "path", p, "error", err)
		}
	}
}
