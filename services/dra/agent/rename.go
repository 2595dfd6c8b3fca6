package agent

import (
	"context"
	"fmt"
	"time"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/claims"
	"github.com/netdra/netdra/services/dra/nodeconfig"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// The driver-rename protocol: how apply puts a NodeConfig with a new
// driverName in force without a restart. The kubelet unprepares a claim
// through the driver that prepared it, so a rename is refused while any
// claim is prepared (or being prepared or freed) under the old name. It runs
// under serveMu, in four steps:
//
//  1. beginRename: the name in force is the served plugin's, else the spec
//     in force's, else (dra starts) the one the node's claims were prepared
//     under. A rename with claims prepared is refused. Then the NodeConfig
//     is applied again once the node has none (retryWhenUnprepared) and, at
//     dra's start, the rest of the spec is put in force under the old name
//     so that those claims are served. Otherwise the old plugin's gate
//     closes: no kubelet call under the old name from here on, once the
//     last one's reply is out.
//  2. apply configures the provisioner and the pools; when that fails,
//     cancel opens the gate again and the old name stays.
//  3. complete stops the old plugin and checks again: a claim may have been
//     prepared before the gate closed, or the kubelet may have called while
//     the plugin stopped (the gate was knocked). Refused, it puts the
//     configuration in force back and serves the old name again. Else the
//     old name's ResourceSlices of this node are deleted.
//  4. apply makes the spec the one in force, and serveNewName serves the
//     plugin under the new name when the old one was served.
//
// With a socket holder (-keep-sockets) the kubelet sockets are the
// holder's, by path, and the paths carry the driver name. Stopping the old
// plugin in step 3 leaves the holder holding the old name's sockets, still
// registered with the kubelet: a rollback serves them again as they are,
// with no new registration. The new name's first take (serveNewName) asks
// for its own sockets only: the holder closes and removes the old name's
// (the kubelet's plugin watcher deregisters the old driver) and creates
// the new name's (the watcher registers the new one). A kubelet call under
// the old name that waits in the old sockets' backlog meanwhile fails when
// they close; none is expected, no claim being prepared under it.

// rename is a driverName change under way in apply, from the name in force
// to the spec's. A nil *rename is no change: its methods do nothing.
type rename struct {
	a        *Agent
	from, to string
	old      *serving // the plugin served under from; nil when none is
}

// beginRename returns the rename spec asks for, nil when it asks none, or
// why it is refused (a *nodeconfig.Refusal while claims are prepared). From a
// rename it returns on, no kubelet call is under way under the old name.
func (a *Agent) beginRename(ctx context.Context, spec *v1alpha1.NodeConfigSpec, generation int64) (*rename, error) {
	a.mu.Lock()
	old, cur := a.serving, a.spec
	a.mu.Unlock()
	from, err := a.nameInForce(ctx, old, cur, spec.DriverName)
	if err != nil {
		return nil, err
	}
	if from == "" || from == spec.DriverName {
		return nil, nil
	}
	if err := a.refuseRename(ctx, from, spec.DriverName); err != nil {
		return nil, a.keepOldName(ctx, cur, spec, generation, from, err)
	}
	if old != nil {
		if err := a.closeGate(ctx, old); err != nil {
			return nil, err
		}
	}
	return &rename{a: a, from: from, to: spec.DriverName, old: old}, nil
}

// nameInForce is the driver name the node's claims are served under: the
// served plugin's (old), else the spec in force's (cur), else, when dra
// starts, the name claims were prepared under before if it is not want
// (preparedUnder), or "".
func (a *Agent) nameInForce(ctx context.Context, old *serving, cur *v1alpha1.NodeConfigSpec, want string) (string, error) {
	switch {
	case old != nil:
		return old.name, nil
	case cur != nil:
		return cur.DriverName, nil
	}
	// dra starts: claims prepared before may be under another name.
	return a.preparedUnder(ctx, want)
}

// keepOldName follows a rename from the name from refused before anything
// changed: the NodeConfig is applied again once no claim is left and, when
// no spec is in force yet (cur is nil: dra starts), spec is put in force
// under from, so that the prepared claims are served with the rest of the
// configuration. It returns refusal, or why spec could not be put in force.
func (a *Agent) keepOldName(ctx context.Context, cur, spec *v1alpha1.NodeConfigSpec, generation int64, from string, refusal error) error {
	a.retryWhenUnprepared()
	if cur != nil {
		return refusal
	}
	kept := spec.DeepCopy()
	kept.DriverName = from
	if err := a.putInForce(ctx, kept, generation); err != nil {
		return err
	}
	return refusal
}

// cancel gives up the rename before complete, after the new configuration
// failed: kubelet calls under the old name go on.
func (r *rename) cancel() {
	if r == nil || r.old == nil {
		return
	}
	r.old.gate.Open()
}

// complete stops the plugin under the old name and checks once more that
// no claim is prepared under it (one may have been before the gate closed)
// and that the kubelet did not call while the plugin stopped. Refused, it
// rolls back (the configuration in force and the plugin under the old
// name) and returns why; else it deletes the old name's ResourceSlices of
// this node.
func (r *rename) complete(ctx context.Context) error {
	if r == nil {
		return nil
	}
	a := r.a
	knocked := false
	if r.old != nil {
		a.stopServingLocked()
		knocked = r.old.gate.WasKnocked()
	}
	err := a.refuseRename(ctx, r.from, r.to)
	if err == nil && knocked {
		err = &nodeconfig.Refusal{Reason: v1alpha1.ReasonDriverNameInUse, Message: fmt.Sprintf(
			"driverName change from %s to %s: the kubelet called the plugin while it was stopping; retried", r.from, r.to)}
	}
	if err != nil {
		r.rollBack(ctx)
		return err
	}
	if err := publish.DeleteSlices(ctx, a.cfg.Kube, a.cfg.NodeName, r.from); err != nil {
		a.log.Warn("Deleting the old driver's ResourceSlices", "driver", r.from, "error", err)
	}
	return nil
}

// rollBack sends the provisioner the configuration in force again and
// serves the plugin under the name in force, the old one.
func (r *rename) rollBack(ctx context.Context) {
	a := r.a
	a.mu.Lock()
	cur := a.spec
	a.mu.Unlock()
	if err := a.configure(ctx, cur); err != nil {
		a.log.Error("Restoring the provisioner configuration in force", "error", err)
	}
	a.restartLocked()
}

// serveNewName serves the plugin under the name now in force, the new one,
// when it was served under the old one.
func (r *rename) serveNewName() {
	if r == nil || r.old == nil {
		return
	}
	r.a.restartLocked()
}

// closeGate waits until no kubelet call is under way in s (at most 30 s)
// and closes its gate.
func (a *Agent) closeGate(ctx context.Context, s *serving) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.gate.Close(ctx); err != nil {
		return fmt.Errorf("driverName change from %s: waiting for the kubelet's calls to end: %w", s.name, err)
	}
	return nil
}

// retryWhenUnprepared has the NodeConfig applied again as soon as the
// node has no allocation left, for a refused driverName change. One
// watch at a time; it ends with the agent's run.
func (a *Agent) retryWhenUnprepared() {
	a.mu.Lock()
	ctx, w := a.runCtx, a.watcher
	if a.waitingUnprepared || ctx == nil || w == nil {
		a.mu.Unlock()
		return
	}
	a.waitingUnprepared = true
	a.mu.Unlock()
	go func() {
		defer func() {
			a.mu.Lock()
			a.waitingUnprepared = false
			a.mu.Unlock()
		}()
		for {
			v, changed := a.pub.View()
			if v.Synced && len(v.Allocations) == 0 {
				w.Retry()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
}

// preparedUnder returns the driver name the node's prepared claims were
// prepared under when it is not want (dra restarted with a changed
// driverName), else "". It reads the claims of the state's allocations; a
// claim that is gone tells nothing.
func (a *Agent) preparedUnder(ctx context.Context, want string) (string, error) {
	resp, err := a.cfg.State.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
	if err != nil {
		return "", fmt.Errorf("listing the prepared claims: %w", err)
	}
	for _, row := range resp.GetAllocations() {
		name, err := claims.ClaimDriver(ctx, a.cfg.Kube, row.GetClaimNamespace(), row.GetClaimName(), row.GetClaimUid(), a.cfg.NodeName, row.GetPool(), row.GetDeviceName())
		if err != nil {
			return "", err
		}
		if name != "" && name != want {
			return name, nil
		}
	}
	return "", nil
}

// refuseRename returns a *nodeconfig.Refusal while claims are prepared (or
// being prepared or freed) on the node: the kubelet unprepares a claim
// through the driver that prepared it.
func (a *Agent) refuseRename(ctx context.Context, from, to string) error {
	resp, err := a.cfg.State.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
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
