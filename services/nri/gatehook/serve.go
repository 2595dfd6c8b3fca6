package gatehook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Server is nri's side of the gate.
type Server struct {
	// Wait answers one question: nil when the pod's devices are all in
	// its network namespace, else the refusal's reason. ctx ends when the
	// request's wait is over or the hook hung up.
	Wait func(ctx context.Context, req Request) error
	// Admit, when set, vets a connection before its question is read
	// (the peer's credentials); an error closes it unanswered.
	Admit func(net.Conn) error
	// Warn, when set, is told what went wrong with a connection (slog's
	// Logger.Warn fits; this package links no logger, for the hook).
	Warn func(msg string, args ...any)
}

// readTimeout bounds the read of a request: a hook writes its one frame
// right after it connected.
const readTimeout = 5 * time.Second

// Serve answers the questions of the connections ln accepts until ctx
// ends or ln fails, then closes ln and waits for the answers under way
// (their waits are ended). It returns nil when ctx ended.
func (s Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			ln.Close()
			return fmt.Errorf("gate socket: %w", err)
		}
		wg.Go(func() { s.answer(ctx, conn) })
	}
}

// answer reads one request on conn and writes the answer.
func (s Server) answer(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	warn := s.Warn
	if warn == nil {
		warn = func(string, ...any) {}
	}
	if s.Admit != nil {
		if err := s.Admit(conn); err != nil {
			warn("Gate connection refused", "error", err)
			return
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(readTimeout))
	var req Request
	if err := readFrame(conn, &req); err != nil {
		warn("Gate request unread: the hook refuses its container", "error", err)
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	ans := Answer{Attached: true}
	if err := check(req); err != nil {
		ans = Answer{Reason: err.Error()}
	} else if err := s.wait(ctx, conn, req); err != nil {
		ans = Answer{Reason: err.Error()}
	}
	_ = conn.SetWriteDeadline(time.Now().Add(readTimeout))
	if err := writeFrame(conn, ans); err != nil {
		warn("Gate answer unsent: the hook refuses its container", "pod", req.PodUID, "error", err)
	}
}

// wait runs s.Wait for req, within the request's wait, ended early when
// the hook hangs up (it reads the connection: the hook sends nothing more
// but its close).
func (s Server) wait(ctx context.Context, conn net.Conn, req Request) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(req.WaitMillis)*time.Millisecond)
	defer cancel()
	hungUp := make(chan struct{})
	go func() {
		defer close(hungUp)
		var b [1]byte
		_, _ = conn.Read(b[:]) // returns at the hook's close, or at the deadline set below
		cancel()
	}()
	err := s.Wait(ctx, req)
	cancel()
	_ = conn.SetReadDeadline(time.Unix(1, 0))
	<-hungUp
	return err
}

// check refuses a request that names no pod or no wait.
func check(req Request) error {
	switch {
	case req.PodUID == "":
		return errors.New("netdra: the gate's request names no pod (podUID empty)")
	case req.WaitMillis <= 0:
		return fmt.Errorf("netdra: the gate's request for pod %s has no time to wait (waitMillis %d)", req.PodUID, req.WaitMillis)
	}
	return nil
}
