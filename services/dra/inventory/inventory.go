// Package inventory pipes the provisioner's device inventory into the state
// service and keeps the provisioner configured: on every (re)connection to
// the provisioner it sends the current manager configuration first, then
// copies each WatchDevices message into state ReplaceDevices. Either side
// may restart; the pump reconnects and carries on.
package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/protobuf/proto"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/rpc"
)

// Pump keeps the provisioner configured and its inventory in the state
// service.
type Pump struct {
	log         *slog.Logger
	provisioner provisionerv1.ProvisionerServiceClient
	state       statev1.StateServiceClient

	mu     sync.Mutex
	config *provisionerv1.ConfigureRequest
}

// New returns a pump; nothing is configured until Configure.
func New(log *slog.Logger, provisioner provisionerv1.ProvisionerServiceClient, state statev1.StateServiceClient) *Pump {
	return &Pump{log: log, provisioner: provisioner, state: state}
}

// Configure sends cfg to the provisioner now and remembers it for every
// reconnection. An error (the provisioner refused the config, or is
// unreachable within ctx) leaves the previous config in force.
func (p *Pump) Configure(ctx context.Context, cfg *provisionerv1.ConfigureRequest) (*provisionerv1.ConfigureResponse, error) {
	resp, err := p.provisioner.Configure(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("configuring the provisioner: %w", err)
	}
	p.mu.Lock()
	p.config = proto.CloneOf(cfg)
	p.mu.Unlock()
	return resp, nil
}

// Run pumps until ctx ends and returns ctx.Err().
func (p *Pump) Run(ctx context.Context) error {
	return rpc.Retry(ctx, p.log, "device inventory", p.pumpOnce)
}

// pumpOnce configures the provisioner (it may have restarted and forgotten)
// and copies its inventory stream into the state service until the stream
// breaks.
func (p *Pump) pumpOnce(ctx context.Context) error {
	p.mu.Lock()
	cfg := p.config
	p.mu.Unlock()
	if cfg != nil {
		if _, err := p.provisioner.Configure(ctx, cfg); err != nil {
			return fmt.Errorf("re-sending the configuration: %w", err)
		}
	}
	stream, err := p.provisioner.WatchDevices(ctx, &provisionerv1.WatchDevicesRequest{})
	if err != nil {
		return fmt.Errorf("watching devices: %w", err)
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("receiving devices: %w", err)
		}
		_, err = p.state.ReplaceDevices(ctx, &statev1.ReplaceDevicesRequest{Manager: msg.GetManager(), Devices: msg.GetDevices()})
		if err != nil {
			return fmt.Errorf("replacing %s devices: %w", msg.GetManager(), err)
		}
		p.log.Debug("Inventory copied", "manager", msg.GetManager().String(), "devices", len(msg.GetDevices()))
	}
}
