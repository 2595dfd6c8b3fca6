// Package rename is the driver-rename protocol: how dra puts a NodeConfig
// with a new driverName in force without a restart. The kubelet
// unprepares a claim through the driver that prepared it, so a rename is
// refused while any claim is prepared (or being prepared or freed) under
// the old name. The agent's apply runs it under its serve lock, in four
// steps:
//
//  1. Begin: the name in force is the served plugin's, else the spec in
//     force's, else (dra starts) the one the node's claims were prepared
//     under. A rename with claims prepared is refused. Then the NodeConfig
//     is applied again once the node has none (Run's watch) and, at dra's
//     start, the rest of the spec is put in force under the old name so
//     that those claims are served. Otherwise the old plugin's gate
//     closes: no kubelet call under the old name from here on, once the
//     last one's reply is out.
//  2. apply configures the provisioner and the pools; when that fails,
//     Cancel opens the gate again and the old name stays.
//  3. Complete stops the old plugin and checks again: a claim may have
//     been prepared before the gate closed, or the kubelet may have called
//     while the plugin stopped (the gate was knocked). Refused, it puts the
//     configuration in force back and serves the old name again. Else the
//     old name's ResourceSlices of this node are deleted.
//  4. apply makes the spec the one in force, and ServeNewName serves the
//     plugin under the new name when the old one was served.
//
// With a socket holder (-keep-sockets) the kubelet sockets are the
// holder's, by path, and the paths carry the driver name. Stopping the old
// plugin in step 3 leaves the holder holding the old name's sockets, still
// registered with the kubelet: a rollback serves them again as they are,
// with no new registration. The new name's first take (ServeNewName) asks
// for its own sockets only: the holder closes and removes the old name's
// (the kubelet's plugin watcher deregisters the old driver) and creates
// the new name's (the watcher registers the new one). A kubelet call under
// the old name that waits in the old sockets' backlog meanwhile fails when
// they close; none is expected, no claim being prepared under it.
package rename

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/callgate"
	"github.com/netdra/netdra/services/dra/claims"
	"github.com/netdra/netdra/services/dra/nodeconfig"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// Host is the agent as a rename works on it. Its methods are called
// under the agent's serve lock (from apply), and must not take it.
type Host interface {
	// Served is the driver name and gate of the kubelet plugin served
	// now; a nil gate when none is.
	Served() (name string, gate *callgate.Gate)
	// InForce is the spec in force, nil before the first.
	InForce() *v1alpha1.NodeConfigSpec
	// Configure sends spec's configuration to the provisioner and the
	// state service, without putting it in force.
	Configure(ctx context.Context, spec *v1alpha1.NodeConfigSpec) error
	// PutInForce configures with spec and makes it the spec in force.
	PutInForce(ctx context.Context, spec *v1alpha1.NodeConfigSpec, generation int64) error
	// StopServing stops the kubelet plugin served now.
	StopServing()
	// ServeAgain serves the kubelet plugin again, in the background,
	// under the driver name in force when it gets to it.
	ServeAgain()
}

// Allocations is what tells the node's allocations: the publisher's view
// and a channel closed at its next change.
type Allocations interface {
	View() (publish.View, <-chan struct{})
}

// Config is what the renamer needs.
type Config struct {
	NodeName    string
	Kube        kubernetes.Interface
	State       statev1.StateServiceClient
	Logger      *slog.Logger
	Host        Host
	Allocations Allocations
	// Retry has the NodeConfig applied again (the watcher's Retry).
	Retry func()
}

// Renamer runs driver renames for one agent.
type Renamer struct {
	cfg Config
	log *slog.Logger
	// unprepared asks Run to watch for the node's last allocation to go.
	unprepared chan struct{}
}

// New returns the renamer.
func New(cfg Config) *Renamer {
	return &Renamer{cfg: cfg, log: cfg.Logger, unprepared: make(chan struct{}, 1)}
}

// Rename is a driverName change under way in the agent's apply, from the
// name in force to the spec's. A nil *Rename is no change: its methods do
// nothing.
type Rename struct {
	r        *Renamer
	from, to string
	// old is the gate of the plugin served under from; nil when none is.
	old *callgate.Gate
}

// Begin returns the rename spec asks for, nil when it asks none, or why
// it is refused (a *nodeconfig.Refusal while claims are prepared). From a
// rename it returns on, no kubelet call is under way under the old name.
func (r *Renamer) Begin(ctx context.Context, spec *v1alpha1.NodeConfigSpec, generation int64) (*Rename, error) {
	servedName, old := r.cfg.Host.Served()
	cur := r.cfg.Host.InForce()
	from, err := r.nameInForce(ctx, servedName, old, cur, spec.DriverName)
	if err != nil {
		return nil, err
	}
	if from == "" || from == spec.DriverName {
		return nil, nil
	}
	if err := r.refuse(ctx, from, spec.DriverName); err != nil {
		return nil, r.keepOldName(ctx, cur, spec, generation, from, err)
	}
	if old != nil {
		if err := closeGate(ctx, servedName, old); err != nil {
			return nil, err
		}
	}
	return &Rename{r: r, from: from, to: spec.DriverName, old: old}, nil
}

// nameInForce is the driver name the node's claims are served under: the
// served plugin's (servedName, when its gate is not nil), else the spec in
// force's (cur), else, when dra starts, the name claims were prepared
// under before if it is not want (preparedUnder), or "".
func (r *Renamer) nameInForce(ctx context.Context, servedName string, served *callgate.Gate, cur *v1alpha1.NodeConfigSpec, want string) (string, error) {
	switch {
	case served != nil:
		return servedName, nil
	case cur != nil:
		return cur.DriverName, nil
	}
	// dra starts: claims prepared before may be under another name.
	return r.preparedUnder(ctx, want)
}

// keepOldName follows a rename from the name from refused before anything
// changed: the NodeConfig is applied again once no claim is left and, when
// no spec is in force yet (cur is nil: dra starts), spec is put in force
// under from, so that the prepared claims are served with the rest of the
// configuration. It returns refusal, or why spec could not be put in force.
func (r *Renamer) keepOldName(ctx context.Context, cur, spec *v1alpha1.NodeConfigSpec, generation int64, from string, refusal error) error {
	r.retryWhenUnprepared()
	if cur != nil {
		return refusal
	}
	kept := spec.DeepCopy()
	kept.DriverName = from
	if err := r.cfg.Host.PutInForce(ctx, kept, generation); err != nil {
		return err
	}
	return refusal
}

// Cancel gives up the rename before Complete, after the new configuration
// failed: kubelet calls under the old name go on.
func (rn *Rename) Cancel() {
	if rn == nil || rn.old == nil {
		return
	}
	rn.old.Open()
}

// Complete stops the plugin under the old name and checks once more that
// no claim is prepared under it (one may have been before the gate closed)
// and that the kubelet did not call while the plugin stopped. Refused, it
// rolls back (the configuration in force and the plugin under the old
// name) and returns why; else it deletes the old name's ResourceSlices of
// this node.
func (rn *Rename) Complete(ctx context.Context) error {
	if rn == nil {
		return nil
	}
	r := rn.r
	knocked := false
	if rn.old != nil {
		r.cfg.Host.StopServing()
		knocked = rn.old.WasKnocked()
	}
	err := r.refuse(ctx, rn.from, rn.to)
	if err == nil && knocked {
		err = &nodeconfig.Refusal{Reason: v1alpha1.ReasonDriverNameInUse, Message: fmt.Sprintf(
			"driverName change from %s to %s: the kubelet called the plugin while it was stopping; retried", rn.from, rn.to)}
	}
	if err != nil {
		rn.rollBack(ctx)
		return err
	}
	if err := publish.DeleteSlices(ctx, r.cfg.Kube, r.cfg.NodeName, rn.from); err != nil {
		r.log.Warn("Deleting the old driver's ResourceSlices", "driver", rn.from, "error", err)
	}
	return nil
}

// rollBack sends the provisioner the configuration in force again and
// serves the plugin under the name in force, the old one.
func (rn *Rename) rollBack(ctx context.Context) {
	h := rn.r.cfg.Host
	if err := h.Configure(ctx, h.InForce()); err != nil {
		rn.r.log.Error("Restoring the provisioner configuration in force", "error", err)
	}
	h.ServeAgain()
}

// ServeNewName serves the plugin under the name now in force, the new one,
// when it was served under the old one.
func (rn *Rename) ServeNewName() {
	if rn == nil || rn.old == nil {
		return
	}
	rn.r.cfg.Host.ServeAgain()
}

// closeGateTimeout bounds closeGate's wait for the kubelet calls under
// way.
const closeGateTimeout = 30 * time.Second

// closeGate waits until no kubelet call is under way in the plugin served
// under name (at most closeGateTimeout) and closes its gate.
func closeGate(ctx context.Context, name string, g *callgate.Gate) error {
	ctx, cancel := context.WithTimeout(ctx, closeGateTimeout)
	defer cancel()
	if err := g.Close(ctx); err != nil {
		return fmt.Errorf("driverName change from %s: waiting for the kubelet's calls to end: %w", name, err)
	}
	return nil
}

// retryWhenUnprepared has Run watch for the node's last allocation to go,
// for a refused driverName change.
func (r *Renamer) retryWhenUnprepared() {
	select {
	case r.unprepared <- struct{}{}:
	default:
	}
}

// Run has the NodeConfig applied again (Config.Retry) as soon as the node
// has no allocation left, each time a refused rename asks for it. One
// watch at a time: an ask while one is under way is that one's. It
// returns nil when ctx ends.
func (r *Renamer) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.unprepared:
		}
		if !r.waitUnprepared(ctx) {
			return nil
		}
		select {
		case <-r.unprepared: // asked while this watch was under way
		default:
		}
		r.cfg.Retry()
	}
}

// waitUnprepared waits until the node has no allocation left, and
// reports false when ctx ended first.
func (r *Renamer) waitUnprepared(ctx context.Context) bool {
	for {
		v, changed := r.cfg.Allocations.View()
		if v.Synced && len(v.Allocations) == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// preparedUnder returns the driver name the node's prepared claims were
// prepared under when it is not want (dra restarted with a changed
// driverName), else "". It reads the claims of the state's allocations; a
// claim that is gone tells nothing.
func (r *Renamer) preparedUnder(ctx context.Context, want string) (string, error) {
	resp, err := r.cfg.State.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
	if err != nil {
		return "", fmt.Errorf("listing the prepared claims: %w", err)
	}
	for _, row := range resp.GetAllocations() {
		name, err := claims.ClaimDriver(ctx, r.cfg.Kube, row.GetClaimNamespace(), row.GetClaimName(), row.GetClaimUid(), r.cfg.NodeName, row.GetPool(), row.GetDeviceName())
		if err != nil {
			return "", err
		}
		if name != "" && name != want {
			return name, nil
		}
	}
	return "", nil
}

// refuse returns a *nodeconfig.Refusal while claims are prepared (or
// being prepared or freed) on the node: the kubelet unprepares a claim
// through the driver that prepared it. Another error is the state
// service's.
func (r *Renamer) refuse(ctx context.Context, from, to string) error {
	resp, err := r.cfg.State.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
	if err != nil {
		return fmt.Errorf("driverName change from %s to %s: listing the prepared claims: %w", from, to, err)
	}
	prepared := map[string]bool{}
	for _, row := range resp.GetAllocations() {
		prepared[row.GetClaimUid()] = true
	}
	if n := len(prepared); n > 0 {
		return &nodeconfig.Refusal{Reason: v1alpha1.ReasonDriverNameInUse, Message: fmt.Sprintf(
			"driverName change from %s to %s refused: %d claims are prepared under %s; it is applied once they are unprepared",
			from, to, n, from)}
	}
	return nil
}
