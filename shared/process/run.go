package process

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"syscall"

	"github.com/oklog/run"

	"github.com/netdra/netdra/shared/rpc"
)

// Actor is a unit of a process's lifetime run by [RunServer], as in
// github.com/oklog/run: Execute runs until done or interrupted; Interrupt
// makes Execute return promptly and may be called after Execute returned.
type Actor struct {
	Execute   func() error
	Interrupt func(error)
}

// RunServer serves srv, together with the extra actors, until SIGINT or
// SIGTERM arrives, ctx ends or any actor returns; then it interrupts all of
// them, the extra actors before srv, and waits for them to return. Once
// the process has served a while it gives back the pages of its binary
// that its start-up touched (giveBackStartupPages). It returns nil when the
// shutdown came from a signal or from ctx, and otherwise the error of the
// actor that returned first. This is the shape of every netdra main.
func RunServer(ctx context.Context, log *slog.Logger, srv *rpc.Server, extra ...Actor) error {
	var g run.Group
	g.Add(run.SignalHandler(ctx, syscall.SIGINT, syscall.SIGTERM))
	// Actors are interrupted in the order they were added: the extra ones
	// first, so they can end long streams before the graceful stop waits
	// for them.
	for _, a := range append(extra, startupPages(log)) {
		g.Add(a.Execute, a.Interrupt)
	}
	g.Add(srv.Serve, func(error) { srv.Stop() })
	err := g.Run()
	if errors.Is(err, run.ErrSignal) || (ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		log.Info("Shut down", "reason", err)
		return nil
	}
	return err
}

// OnStop is an actor that does nothing until the group stops, then runs fn.
// Given to RunServer, fn runs before the server's graceful stop: the place
// to end long streams (watches) so the stop does not wait for them.
func OnStop(fn func()) Actor {
	done := make(chan struct{})
	var once sync.Once
	return Actor{
		Execute:   func() error { <-done; return nil },
		Interrupt: func(error) { once.Do(func() { fn(); close(done) }) },
	}
}
