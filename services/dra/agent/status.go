package agent

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	drav1 "github.com/netdra/netdra/protos/netdra/dra/v1"
)

// waitingFor says what keeps dra from serving the kubelet, or from doing
// its job once it does: the peers it cannot reach, the NodeConfig not
// applied yet, the recovery of the node's claims (registered is whether
// the kubelet registered the plugin).
func (a *Agent) waitingFor(registered bool) []string {
	var out []string
	if a.cfg.Waiting != nil {
		out = a.cfg.Waiting()
	}
	select {
	case <-a.configured:
		if !registered {
			out = append(out, "the recovery of the node's claims and the kubelet's registration of the plugin")
		}
	default:
		out = append(out, fmt.Sprintf("NodeConfig %s applied through the provisioner's Configure (its defaults when there is none)", a.cfg.NodeName))
	}
	return out
}

// Status implements drav1.DraServiceServer.
func (a *Agent) Status(context.Context, *drav1.StatusRequest) (*drav1.StatusResponse, error) {
	attempts, regErr := a.reg.Status()
	a.mu.Lock()
	out := &drav1.StatusResponse{DriverName: a.driverName, Registered: a.serving != nil, ConfigGeneration: a.generation,
		RegistrationAttempts: uint32(attempts), RegistrationError: regErr}
	if a.spec != nil {
		out.ConfiguredDriverName = a.spec.DriverName
	}
	a.mu.Unlock()
	out.WaitingFor = a.waitingFor(out.GetRegistered())
	last := a.pub.Last()
	if !last.Time.IsZero() {
		out.LastPublication = timestamppb.New(last.Time)
	}
	for _, p := range last.Pools {
		out.Pools = append(out.Pools, &drav1.PoolStatus{Name: p.Name, Devices: uint32(len(p.Devices))})
	}
	return out, nil
}
