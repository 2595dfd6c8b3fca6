// Package devicesync pipes the provisioner's device inventory into the state
// service and keeps the provisioner configured: on every (re)connection to
// the provisioner it sends the current manager configuration first, then
// copies each WatchDevices message into state ReplaceDevices. Either side
// may restart; the pump reconnects and carries on. The state service keeps
// the inventory in memory only: when it restarts (Resend, called when a
// watcher sees its epoch change), the last inventory of each manager is
// copied again, since the provisioner sends nothing new until something
// changes.
package devicesync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/rpc"
)

// Provisioner is what the pump asks of the provisioner: Configure sets
// its device managers (an error leaves the previous configuration in
// force), WatchDevices streams each manager's complete inventory on every
// change. provisionerv1.ProvisionerServiceClient satisfies it.
type Provisioner interface {
	Configure(ctx context.Context, in *provisionerv1.ConfigureRequest, opts ...grpc.CallOption) (*provisionerv1.ConfigureResponse, error)
	WatchDevices(ctx context.Context, in *provisionerv1.WatchDevicesRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[provisionerv1.WatchDevicesResponse], error)
}

// State is where the pump copies the inventory: ReplaceDevices replaces
// one manager's devices at once. statev1.StateServiceClient satisfies it.
type State interface {
	ReplaceDevices(ctx context.Context, in *statev1.ReplaceDevicesRequest, opts ...grpc.CallOption) (*statev1.ReplaceDevicesResponse, error)
}

var (
	_ Provisioner = provisionerv1.ProvisionerServiceClient(nil)
	_ State       = statev1.StateServiceClient(nil)
)

// Pump keeps the provisioner configured and its inventory in the state
// service.
type Pump struct {
	log         *slog.Logger
	provisioner Provisioner
	state       State

	mu     sync.Mutex
	config *provisionerv1.ConfigureRequest

	// copyMu serializes the copies into the state service, so that a
	// resend never overwrites a newer inventory with an older one; last
	// is each manager's last copy.
	copyMu sync.Mutex
	last   map[devicev1.DeviceManager]*statev1.ReplaceDevicesRequest
	resend chan struct{}
}

// New returns a pump; nothing is configured until Configure.
func New(log *slog.Logger, provisioner Provisioner, state State) *Pump {
	return &Pump{log: log, provisioner: provisioner, state: state,
		last: map[devicev1.DeviceManager]*statev1.ReplaceDevicesRequest{}, resend: make(chan struct{}, 1)}
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

// Resend has the last inventory of each manager copied into the state
// service again: it restarted and lost it.
func (p *Pump) Resend() {
	select {
	case p.resend <- struct{}{}:
	default:
	}
}

// Run pumps until ctx ends and returns ctx.Err().
func (p *Pump) Run(ctx context.Context) error {
	go p.resendLoop(ctx)
	return rpc.Retry(ctx, p.log, "device inventory", p.pumpOnce)
}

// resendLoop copies the last inventories again at each Resend, retrying
// with backoff until the state service takes them.
func (p *Pump) resendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.resend:
		}
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			err := p.copyAll(ctx)
			if err == nil || ctx.Err() != nil {
				break
			}
			p.log.Info("Copying the inventory again", "error", err, "delay", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}
}

// copyAll copies every manager's last inventory into the state service.
func (p *Pump) copyAll(ctx context.Context) error {
	p.copyMu.Lock()
	defer p.copyMu.Unlock()
	for m, req := range p.last {
		if _, err := p.state.ReplaceDevices(ctx, req); err != nil {
			return fmt.Errorf("replacing %s devices: %w", m, err)
		}
		p.log.Info("Inventory copied again", "manager", m.String(), "devices", len(req.GetDevices()))
	}
	return nil
}

// copy copies one manager's inventory into the state service.
func (p *Pump) copy(ctx context.Context, req *statev1.ReplaceDevicesRequest) error {
	p.copyMu.Lock()
	defer p.copyMu.Unlock()
	p.last[req.GetManager()] = req
	_, err := p.state.ReplaceDevices(ctx, req)
	return err
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
		if err := p.copy(ctx, &statev1.ReplaceDevicesRequest{Manager: msg.GetManager(), Devices: msg.GetDevices()}); err != nil {
			return fmt.Errorf("replacing %s devices: %w", msg.GetManager(), err)
		}
		p.log.Debug("Inventory copied", "manager", msg.GetManager().String(), "devices", len(msg.GetDevices()))
	}
}
