package process

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netdra/netdra/shared/rpc"
)

// TakeOver is how a node process waits for its turn on the node: while
// the next node pod of a DaemonSet roll starts beside the previous one
// (maxSurge), each of its processes stands by, answering its readiness
// probe, until its predecessor has exited, and only then touches the
// host. The roll then costs a pod only the predecessor's exit and the
// successor's start, not the new pod's creation.
type TakeOver struct {
	// Lock is a file on the host whose lock (flock) the process holds
	// while it runs; empty: none. A second process given the same file
	// waits until the first has exited.
	Lock string
	// After is the socket of a process that must serve (rpc.CheckActive)
	// before this one takes its turn: dra and nri wait for their pod's
	// state service, the one process that every release locks the node
	// for (its state file); empty: none.
	After string
	// Ready, when set, is one more condition of the turn, tried again
	// until it holds: ok, or why not (the state service's: its file is
	// free). An error ends the wait and the process.
	Ready func() (ok bool, why string, err error)
}

// Register adds -take-over-lock and -take-over-after to fs.
func (t *TakeOver) Register(fs *flag.FlagSet) {
	fs.StringVar(&t.Lock, "take-over-lock", "", "a file on the host this process locks while it runs: a second instance (the next node pod's, in a roll) stands by, answering its health check, until the first has exited; empty: none")
	fs.StringVar(&t.After, "take-over-after", "", "the socket of a process that must serve before this one starts its work (the state service's); empty: none")
}

// standByPoll is how often a standing-by process tries its turn again:
// the gap a roll's pods wait for beyond the predecessor's exit.
const standByPoll = 20 * time.Millisecond

// standByLog is how often a process still standing by says so again.
const standByLog = 30 * time.Second

// turn tries the take-over's conditions once, in order: the lock (kept
// in *held once taken), the After socket, Ready. It returns why it must
// wait, "" when the turn is the process's.
func (t *TakeOver) turn(ctx context.Context, held **os.File) (string, error) {
	if t.Lock != "" && *held == nil {
		f, err := tryLock(t.Lock)
		if err != nil {
			return "", err
		}
		if f == nil {
			return fmt.Sprintf("another instance holds %s: the previous node pod's, in a roll; this one takes over when it exits", t.Lock), nil
		}
		*held = f
	}
	if t.After != "" {
		// A plain dial first: grpc logs every failed connection, and
		// nothing listening is the usual reason to wait.
		c, err := net.DialTimeout("unix", t.After, time.Second)
		if err != nil {
			return fmt.Sprintf("waiting for %s to serve: %v", t.After, err), nil
		}
		c.Close()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err = rpc.CheckActive(cctx, t.After)
		cancel()
		if err != nil {
			return fmt.Sprintf("waiting for %s to serve: %v", t.After, err), nil
		}
	}
	if t.Ready != nil {
		ok, why, err := t.Ready()
		if err != nil || !ok {
			return why, err
		}
	}
	return "", nil
}

// tryLock opens path (creating it) and takes its exclusive lock without
// waiting: the open file, which holds the lock until it is closed (at the
// latest when the process ends), or nil when another holds it.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("take-over lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return nil, nil
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("take-over lock %s: %w", path, err)
	}
	return f, nil
}

// errStoppedStandingBy is StandBy's error when a signal ended the wait.
var errStoppedStandingBy = errors.New("stopped while standing by")

// StandBy returns once the process's turn has come (t's conditions all
// hold): at once when they hold at the first try. Otherwise it serves
// cfg's socket with a stand-in (rpc.NewStandIn) that answers its health
// check and fails every other call with why it waits, logs why (again
// every little while), and tries again until its turn comes, ctx ends or
// SIGINT or SIGTERM arrives (errStoppedStandingBy). The returned release
// closes the lock file; until then the process holds the lock (the
// caller keeps it for its lifetime).
func (t *TakeOver) StandBy(ctx context.Context, log *slog.Logger, cfg rpc.ServerConfig) (release func(), err error) {
	var held *os.File
	release = func() {
		if held != nil {
			held.Close()
		}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	why, err := t.turn(ctx, &held)
	if err != nil || why == "" {
		return release, err
	}
	start := time.Now()
	log.Warn("Standing by", "why", why)
	srv := rpc.NewStandIn(cfg, "standing by: "+why)
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	defer func() {
		srv.Stop()
		if serr := <-served; serr != nil && err == nil {
			err = serr
		}
	}()
	poll := time.NewTicker(standByPoll)
	defer poll.Stop()
	said := time.Now()
	for {
		select {
		case <-ctx.Done():
			release()
			return func() {}, errStoppedStandingBy
		case err := <-served:
			// The stand-in could not listen: the socket is not ours.
			release()
			served <- nil
			return func() {}, err
		case <-poll.C:
		}
		now, err := t.turn(ctx, &held)
		if err != nil {
			release()
			return func() {}, err
		}
		if now == "" {
			log.Info("Taking over", "stood by", time.Since(start).Round(time.Millisecond))
			return release, nil
		}
		if now != why || time.Since(said) >= standByLog {
			log.Warn("Standing by", "why", now, "for", time.Since(start).Round(time.Second))
			why, said = now, time.Now()
		}
	}
}
