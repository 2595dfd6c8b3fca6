package agent

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/netdra/netdra/services/dra/sockkeep"
)

// pluginSocket is the DRA socket's name in the driver's plugin directory,
// and registrarSuffix the registration socket's after the driver name:
// the kubelet plugin helper's defaults, which its listen functions are
// called with.
const (
	pluginSocket    = "dra.sock"
	registrarSuffix = "-reg.sock"
)

// heldSockets are the kubelet sockets taken from the socket holder for
// one registration attempt; nil when dra creates its own.
type heldSockets struct {
	a     *Agent
	taken *sockkeep.Taken
	paths []string
}

// takeSockets takes the plugin and registration sockets of driver name
// from the holder (renew: created anew), waiting for the holder while it
// is not there; nil without a holder.
func (a *Agent) takeSockets(ctx context.Context, name string, renew bool) (*heldSockets, error) {
	if a.cfg.KeepSockets == "" {
		return nil, nil
	}
	paths := a.socketPaths(name)
	tries := 0
	t, err := sockkeep.Take(ctx, a.cfg.KeepSockets, paths, renew, func(err error) {
		msg := fmt.Sprintf("waiting for the socket holder at %s: %v", a.cfg.KeepSockets, err)
		a.mu.Lock()
		a.regErr = msg
		a.mu.Unlock()
		if tries%25 == 0 {
			a.log.Warn("Waiting for the socket holder (dra sockets) to hand over the kubelet sockets", "holder", a.cfg.KeepSockets, "error", err)
		}
		tries++
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet sockets: %w", err)
	}
	a.log.Info("Took the kubelet sockets from the holder", "sockets", paths, "inherited", t.Inherited, "registered", t.Registered)
	return &heldSockets{a: a, taken: t, paths: paths}, nil
}

// socketPaths are the plugin and registration sockets of driver name.
func (a *Agent) socketPaths(name string) []string {
	return []string{filepath.Join(a.cfg.PluginDir, name, pluginSocket), filepath.Join(a.cfg.RegistrarDir, name+registrarSuffix)}
}

// holderCheckInterval is how often a dra serving on held sockets asks the
// holder whether it still holds them, and holderUnreachable how many
// checks in a row may fail to reach it before dra gives up.
const (
	holderCheckInterval = 2 * time.Second
	holderUnreachable   = 3
)

// watchHolder asks the holder every holderCheckInterval, until ctx ends
// (the plugin under name stops serving), whether it still holds name's
// sockets. A holder that restarted (it holds them no longer, or cannot be
// reached holderUnreachable times in a row) closed and removed them: the
// kubelet's plugin watcher deregistered the plugin, and dra's duplicates
// listen on sockets nobody can dial. dra then stops with an error, and
// its restart takes the sockets anew from the holder and registers again.
func (a *Agent) watchHolder(ctx context.Context, name string) {
	paths := a.socketPaths(name)
	failed := 0
	t := time.NewTicker(holderCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, holderCheckInterval)
		held, err := sockkeep.Held(cctx, a.cfg.KeepSockets)
		cancel()
		if ctx.Err() != nil {
			return
		}
		var lost error
		switch {
		case err != nil:
			failed++
			a.log.Warn("Could not reach the socket holder", "holder", a.cfg.KeepSockets, "error", err, "failures", failed)
			if failed >= holderUnreachable {
				lost = fmt.Errorf("socket holder %s unreachable %d times in a row: %w", a.cfg.KeepSockets, failed, err)
			}
		case !containsAll(held, paths):
			lost = fmt.Errorf("socket holder %s holds %v, no longer the kubelet sockets %v (it restarted and removed them; the kubelet deregistered the plugin): stopping, to take them anew", a.cfg.KeepSockets, held, paths)
		default:
			failed = 0
		}
		if lost != nil {
			select {
			case a.fatal <- lost:
			case <-ctx.Done():
			}
			return
		}
	}
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// options make the kubelet plugin helper serve on the held sockets.
func (s *heldSockets) options() []kubeletplugin.Option {
	if s == nil {
		return nil
	}
	return []kubeletplugin.Option{kubeletplugin.PluginListener(s.listen), kubeletplugin.RegistrarListener(s.listen)}
}

// listen hands the helper the held socket at path, once; closing it
// leaves the holder's socket listening.
func (s *heldSockets) listen(_ context.Context, path string) (net.Listener, error) {
	l, ok := s.taken.Listeners[path]
	if !ok {
		return nil, fmt.Errorf("the kubelet plugin helper listens on %s, which the socket holder does not hold (it holds %v)", path, s.paths)
	}
	delete(s.taken.Listeners, path)
	return l, nil
}

// closeUnused closes the held sockets the helper did not take.
func (s *heldSockets) closeUnused() {
	if s != nil {
		s.taken.Close()
	}
}

// registered says the kubelet registered the plugin on these sockets
// before, and they were not created anew since.
func (s *heldSockets) registered() bool { return s != nil && s.taken.Registered }

// markRegistered tells the holder the kubelet registered the plugin, for
// the next dra; a failure costs that dra a registration wait, no more.
func (s *heldSockets) markRegistered(ctx context.Context) {
	if s == nil {
		return
	}
	if err := sockkeep.MarkRegistered(ctx, s.a.cfg.KeepSockets, slices.Clone(s.paths)); err != nil {
		s.a.log.Warn("Could not tell the socket holder about the registration", "error", err)
	}
}
