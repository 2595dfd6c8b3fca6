package sockkeep

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// dra's side of the holder: the kubelet sockets of one driver name, taken
// for a registration attempt and served by the kubelet plugin helper, and
// the watch that stops dra once the holder no longer holds them.

// pluginSocket is the DRA socket's name in the driver's plugin directory,
// and registrarSuffix the registration socket's after the driver name:
// the kubelet plugin helper's defaults, which its listen functions are
// called with.
const (
	pluginSocket    = "dra.sock"
	registrarSuffix = "-reg.sock"
)

// KubeletPaths are the plugin and registration sockets of driver name,
// in the plugin directory's <name>/ and in the registrar directory.
func KubeletPaths(pluginDir, registrarDir, name string) []string {
	return []string{filepath.Join(pluginDir, name, pluginSocket), filepath.Join(registrarDir, name+registrarSuffix)}
}

// Sockets are the kubelet sockets taken from the socket holder for one
// registration attempt. A nil *Sockets is none (dra creates its own): its
// methods then do nothing.
type Sockets struct {
	handover string
	log      *slog.Logger
	taken    *Taken
	paths    []string
}

// TakeKubelet takes the kubelet sockets at paths (KubeletPaths) from the
// holder at handover (renew: created anew), waiting for the holder while
// it is not there: waiting, when not nil, is told why after each failed
// attempt to reach it. An error means ctx ended or the holder refused.
func TakeKubelet(ctx context.Context, log *slog.Logger, handover string, paths []string, renew bool, waiting func(msg string)) (*Sockets, error) {
	tries := 0
	t, err := Take(ctx, handover, paths, renew, func(err error) {
		if waiting != nil {
			waiting(fmt.Sprintf("waiting for the socket holder at %s: %v", handover, err))
		}
		if tries%25 == 0 {
			log.Warn("Waiting for the socket holder (dra sockets) to hand over the kubelet sockets", "holder", handover, "error", err)
		}
		tries++
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet sockets: %w", err)
	}
	log.Info("Took the kubelet sockets from the holder", "sockets", paths, "inherited", t.Inherited, "registered", t.Registered)
	return &Sockets{handover: handover, log: log, taken: t, paths: paths}, nil
}

// holderCheckInterval is how often a dra serving on held sockets asks the
// holder whether it still holds them, and holderUnreachable how many
// checks in a row may fail to reach it before dra gives up.
const (
	holderCheckInterval = 2 * time.Second
	holderUnreachable   = 3
)

// WatchHolder asks the holder at handover every holderCheckInterval,
// until ctx ends (the plugin on the sockets at paths stops serving),
// whether it still holds those sockets; it returns nil when ctx ends. A
// holder that restarted (it holds them no longer, or cannot be reached
// holderUnreachable times in a row) closed and removed them: the
// kubelet's plugin watcher deregistered the plugin, and dra's duplicates
// listen on sockets nobody can dial. WatchHolder then returns why, for
// dra to stop with: its restart takes the sockets anew from the holder
// and registers again.
func WatchHolder(ctx context.Context, log *slog.Logger, handover string, paths []string) error {
	failed := 0
	t := time.NewTicker(holderCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, holderCheckInterval)
		held, err := Held(cctx, handover)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			failed++
			log.Warn("Could not reach the socket holder", "holder", handover, "error", err, "failures", failed)
			if failed >= holderUnreachable {
				return fmt.Errorf("socket holder %s unreachable %d times in a row: %w", handover, failed, err)
			}
		case !containsAll(held, paths):
			return fmt.Errorf("socket holder %s holds %v, no longer the kubelet sockets %v (it restarted and removed them; the kubelet deregistered the plugin): stopping, to take them anew", handover, held, paths)
		default:
			failed = 0
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

// Options make the kubelet plugin helper serve on the held sockets.
func (s *Sockets) Options() []kubeletplugin.Option {
	if s == nil {
		return nil
	}
	return []kubeletplugin.Option{kubeletplugin.PluginListener(s.listen), kubeletplugin.RegistrarListener(s.listen)}
}

// listen hands the helper the held socket at path, once; closing it
// leaves the holder's socket listening.
func (s *Sockets) listen(_ context.Context, path string) (net.Listener, error) {
	l, ok := s.taken.Listeners[path]
	if !ok {
		return nil, fmt.Errorf("the kubelet plugin helper listens on %s, which the socket holder does not hold (it holds %v)", path, s.paths)
	}
	delete(s.taken.Listeners, path)
	return l, nil
}

// CloseUnused closes the held sockets the helper did not take.
func (s *Sockets) CloseUnused() {
	if s != nil {
		s.taken.Close()
	}
}

// Registered says the kubelet registered the plugin on these sockets
// before, and they were not created anew since.
func (s *Sockets) Registered() bool { return s != nil && s.taken.Registered }

// MarkRegistered tells the holder the kubelet registered the plugin, for
// the next dra; a failure costs that dra a registration wait, no more.
func (s *Sockets) MarkRegistered(ctx context.Context) {
	if s == nil {
		return
	}
	if err := MarkRegistered(ctx, s.handover, slices.Clone(s.paths)); err != nil {
		s.log.Warn("Could not tell the socket holder about the registration", "error", err)
	}
}
