// Package devicesync pipes the provisioner's device inventory into the state
// service and keeps the provisioner configured: on every (re)connection to
// the provisioner it sends the current manager configuration first, with
// the SR-IOV VFs the state service records as allocated, then copies each
// WatchDevices message into state ReplaceDevices and hands the managers'
// warnings to OnWarnings. Either side
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
	"slices"
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
// one manager's devices at once; ListAllocations lists the allocations,
// whose SR-IOV VFs go with each configuration (the provisioner re-creates
// no PF's VFs while one of them is allocated). statev1.StateServiceClient
// satisfies it.
type State interface {
	ReplaceDevices(ctx context.Context, in *statev1.ReplaceDevicesRequest, opts ...grpc.CallOption) (*statev1.ReplaceDevicesResponse, error)
	ListAllocations(ctx context.Context, in *statev1.ListAllocationsRequest, opts ...grpc.CallOption) (*statev1.ListAllocationsResponse, error)
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

	mu       sync.Mutex
	config   *provisionerv1.ConfigureRequest
	warnings func(devicev1.DeviceManager, []string)

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

// OnWarnings has f called with each manager's warnings (what it does not
// do as configured, see provisionerv1.WatchDevicesResponse) as each of
// the provisioner's inventory messages brings them, from Run's goroutine.
// Call it before Run.
func (p *Pump) OnWarnings(f func(m devicev1.DeviceManager, warnings []string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.warnings = f
}

// Configure sends cfg to the provisioner now, with the allocated VFs
// (withPrepared), and remembers it for every reconnection. An error (the
// provisioner refused the config, or is unreachable within ctx) leaves the
// previous config in force.
func (p *Pump) Configure(ctx context.Context, cfg *provisionerv1.ConfigureRequest) (*provisionerv1.ConfigureResponse, error) {
	resp, err := p.provisioner.Configure(ctx, p.withPrepared(ctx, cfg))
	if err != nil {
		return nil, fmt.Errorf("configuring the provisioner: %w", err)
	}
	p.mu.Lock()
	p.config = proto.CloneOf(cfg)
	p.mu.Unlock()
	return resp, nil
}

// listWait bounds how long withPrepared waits for the state service, so
// that a state service that is down does not keep the configuration from
// the provisioner.
const listWait = 5 * time.Second

// withPrepared is cfg with the devices the state service records as
// allocated (in any phase: from the intent before Setup to a Free that
// failed), read now: the SR-IOV VFs among them, and all of them. When
// they cannot be read within listWait, cfg goes without them: the
// provisioner keeps the last lists it got, re-creates no PF's VFs and
// sweeps no device's eBPF programs before it has them.
func (p *Pump) withPrepared(ctx context.Context, cfg *provisionerv1.ConfigureRequest) *provisionerv1.ConfigureRequest {
	lctx, cancel := context.WithTimeout(ctx, listWait)
	defer cancel()
	resp, err := p.state.ListAllocations(lctx, &statev1.ListAllocationsRequest{})
	if err != nil {
		p.log.Warn("Configuring the provisioner without the allocated VFs: the state service did not list them", "error", err)
		return cfg
	}
	vfs := &provisionerv1.PreparedVfs{Devices: []string{}}
	all := &provisionerv1.PreparedDevices{Devices: []string{}}
	for _, a := range resp.GetAllocations() {
		all.Devices = append(all.Devices, a.GetDeviceName())
		if a.GetManager() == devicev1.DeviceManager_DEVICE_MANAGER_SRIOV {
			vfs.Devices = append(vfs.Devices, a.GetDeviceName())
		}
	}
	slices.Sort(vfs.Devices)
	slices.Sort(all.Devices)
	vfs.Devices, all.Devices = slices.Compact(vfs.Devices), slices.Compact(all.Devices)
	out := proto.CloneOf(cfg)
	out.PreparedVfs, out.PreparedDevices = vfs, all
	return out
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
// under rpc.Retry's backoff until the state service takes them.
func (p *Pump) resendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.resend:
		}
		// rpc.Retry runs its function until its context ends: a copy that
		// succeeds ends that context, which is how this retry stops.
		once, done := context.WithCancel(ctx)
		_ = rpc.Retry(once, p.log, "copying the inventory again", func(ctx context.Context) error {
			err := p.copyAll(ctx)
			if err == nil {
				done()
			}
			return err
		})
		done()
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
// breaks. A message whose devices are those the stream's previous message
// of the manager brought (only its warnings changed) is not copied again.
func (p *Pump) pumpOnce(ctx context.Context) error {
	p.mu.Lock()
	cfg, warnings := p.config, p.warnings
	p.mu.Unlock()
	if cfg != nil {
		if _, err := p.provisioner.Configure(ctx, p.withPrepared(ctx, cfg)); err != nil {
			return fmt.Errorf("re-sending the configuration: %w", err)
		}
	}
	stream, err := p.provisioner.WatchDevices(ctx, &provisionerv1.WatchDevicesRequest{})
	if err != nil {
		return fmt.Errorf("watching devices: %w", err)
	}
	copied := map[devicev1.DeviceManager][]*devicev1.Device{}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("receiving devices: %w", err)
		}
		m := msg.GetManager()
		if prev, ok := copied[m]; !ok || !slices.EqualFunc(prev, msg.GetDevices(), func(a, b *devicev1.Device) bool { return proto.Equal(a, b) }) {
			if err := p.copy(ctx, &statev1.ReplaceDevicesRequest{Manager: m, Devices: msg.GetDevices()}); err != nil {
				return fmt.Errorf("replacing %s devices: %w", m, err)
			}
			copied[m] = msg.GetDevices()
			p.log.Debug("Inventory copied", "manager", m.String(), "devices", len(msg.GetDevices()))
		}
		if warnings != nil {
			warnings(m, msg.GetWarnings())
		}
	}
}
