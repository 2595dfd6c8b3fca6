// Package callgate counts the kubelet's prepare and unprepare calls into
// one served kubelet plugin, so that the plugin is stopped (for a driver
// name change) only when none is under way and its reply went out, and
// notes a call that came while the gate was closed: the change is then
// rolled back, since that call may have prepared or freed a claim.
package callgate

import (
	"context"
	"errors"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// ErrStopping answers a kubelet call that comes while the plugin is being
// stopped for a driver name change; the kubelet retries it.
var ErrStopping = errors.New("the DRA plugin is stopping for a driver name change; retry")

// replyGrace is how long after the kubelet's last call returned the plugin
// may be stopped: the kubelet plugin helper stops its gRPC server hard, and
// a reply cut off would leave the kubelet retrying an unprepare under a
// driver name that is gone.
const replyGrace = time.Second

// Gate counts the kubelet's prepare and unprepare calls into one served
// plugin, so that it is stopped only when none is under way, and notes a
// call that came while it was closed. Its zero value is open.
type Gate struct {
	mu       sync.Mutex
	inflight int
	lastDone time.Time
	closed   bool
	knocked  bool
}

func (g *Gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.knocked = true
		return false
	}
	g.inflight++
	return true
}

func (g *Gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	g.lastDone = time.Now()
}

// Close closes the gate once no call is under way and the last one
// returned replyGrace ago, or returns ctx's error (the gate stays open).
func (g *Gate) Close(ctx context.Context) error {
	// Between two looks it waits what is left of the grace, between 10ms
	// and 50ms.
	pause := func() time.Duration {
		g.mu.Lock()
		defer g.mu.Unlock()
		return max(min(g.graceLeft(), 50*time.Millisecond), 10*time.Millisecond)
	}
	return wait.DelayFunc(pause).Until(ctx, true, true, func(context.Context) (bool, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.inflight == 0 && g.graceLeft() <= 0 {
			g.closed = true
			return true, nil
		}
		return false, nil
	})
}

// graceLeft is how much of replyGrace is left since the last call
// returned; g.mu is held.
func (g *Gate) graceLeft() time.Duration {
	return replyGrace - time.Since(g.lastDone)
}

// Open opens a closed gate again and forgets the calls it refused.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed, g.knocked = false, false
}

// WasKnocked reports whether a call came while the gate was closed.
func (g *Gate) WasKnocked() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.knocked
}

// gated is a plugin whose prepare and unprepare calls pass a gate.
type gated struct {
	kubeletplugin.DRAPlugin
	g *Gate
}

// Wrap returns plugin with its prepare and unprepare calls passing g: a
// call while g is closed returns ErrStopping, which the kubelet retries.
func Wrap(plugin kubeletplugin.DRAPlugin, g *Gate) kubeletplugin.DRAPlugin {
	return &gated{DRAPlugin: plugin, g: g}
}

func (p *gated) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	if !p.g.enter() {
		return nil, ErrStopping
	}
	defer p.g.leave()
	return p.DRAPlugin.PrepareResourceClaims(ctx, claims)
}

func (p *gated) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	if !p.g.enter() {
		return nil, ErrStopping
	}
	defer p.g.leave()
	return p.DRAPlugin.UnprepareResourceClaims(ctx, claims)
}
