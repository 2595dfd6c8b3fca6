package hostdev

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Backoff between attempts to subscribe again after the kernel ended a
// subscription.
const (
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
)

// watcher follows link and default-route events until its context ends.
type watcher struct{ wg sync.WaitGroup }

// Wait returns once the watcher's goroutines are gone, which is after its
// context ended.
func (w *watcher) Wait() { w.wg.Wait() }

// watch subscribes to link and route events in the host namespace and
// signals changed (without blocking; one pending signal stands for any
// number of events) on every link event and every default-route event of
// the main table. Link events are applied to cache (when not nil) first,
// and a lost link subscription invalidates it. Subscriptions end with ctx.
// It fails only when the first subscriptions cannot be made.
func (m *Manager) watch(ctx context.Context, changed chan<- struct{}, cache *linkCache) (*watcher, error) {
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	w := &watcher{}
	links, err := m.subscribeLinks(ctx)
	if err != nil {
		return nil, err
	}
	apply, lost := func(netlink.LinkUpdate) {}, func() {}
	if cache != nil {
		apply, lost = cache.apply, cache.invalidate
	}
	w.wg.Go(func() {
		follow(ctx, m.log, "link", links, m.subscribeLinks, func(u netlink.LinkUpdate) bool { apply(u); return true }, notify, lost, minBackoff)
	})
	routes, err := m.subscribeRoutes(ctx)
	if err != nil {
		return w, err
	}
	w.wg.Go(func() {
		follow(ctx, m.log, "route", routes, m.subscribeRoutes, func(u netlink.RouteUpdate) bool { return isDefaultRoute(u.Route) }, notify, func() {}, minBackoff)
	})
	return w, nil
}

// follow reads a subscription's events until ctx ends, calling notify for
// the relevant ones. When the kernel ends the subscription (a receive
// buffer overrun, say), it calls lost at once, subscribes again after
// first, doubling the wait up to maxBackoff while that fails, and calls
// notify, since events may have been missed. After ctx ends it drains ch
// until the library closes it, so that the library's goroutine is not
// left blocked.
func follow[T any](ctx context.Context, log *slog.Logger, what string, ch <-chan T,
	subscribe func(context.Context) (<-chan T, error), relevant func(T) bool, notify, lost func(), first time.Duration) {
	for {
		for u := range ch {
			if ctx.Err() == nil && relevant(u) {
				notify()
			}
		}
		if ctx.Err() != nil {
			return
		}
		lost()
		log.Info("netlink subscription ended; subscribing again", "events", what)
		backoff := wait.Backoff{Duration: first, Factor: 2, Steps: math.MaxInt32, Cap: maxBackoff}
		for {
			if !sleep(ctx, backoff.Step()) {
				return
			}
			var err error
			if ch, err = subscribe(ctx); err == nil {
				break
			}
			log.Warn("subscribing to netlink events", "events", what, "error", err)
		}
		notify()
	}
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (m *Manager) subscribeLinks(ctx context.Context) (<-chan netlink.LinkUpdate, error) {
	ns, done, err := m.ns.Handle()
	if err != nil {
		return nil, err
	}
	defer done()
	ch := make(chan netlink.LinkUpdate, 64)
	err = netlink.LinkSubscribeWithOptions(ch, ctx.Done(), netlink.LinkSubscribeOptions{
		Namespace:     ns,
		ErrorCallback: m.subscriptionError(ctx, "link"),
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to link events in %s: %w", m.ns, err)
	}
	return ch, nil
}

func (m *Manager) subscribeRoutes(ctx context.Context) (<-chan netlink.RouteUpdate, error) {
	ns, done, err := m.ns.Handle()
	if err != nil {
		return nil, err
	}
	defer done()
	ch := make(chan netlink.RouteUpdate, 64)
	err = netlink.RouteSubscribeWithOptions(ch, ctx.Done(), netlink.RouteSubscribeOptions{
		Namespace:     ns,
		ErrorCallback: m.subscriptionError(ctx, "route"),
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to route events in %s: %w", m.ns, err)
	}
	return ch, nil
}

// subscriptionError logs what the netlink library reports about a
// subscription, unless ctx has ended (closing the socket is an error too).
func (m *Manager) subscriptionError(ctx context.Context, what string) func(error) {
	return func(err error) {
		if ctx.Err() == nil {
			m.log.Warn("netlink subscription", "events", what, "error", err)
		}
	}
}
