// Package server implements netdra.provisioner.v1.ProvisionerService: it
// runs the device managers as Configure says, streams their inventory,
// dispatches Setup and Free to the device's manager, and puts prepared
// devices into pods and takes them out with package link: a dummy device's
// link is created in the pod and deleted there (no namespace move), every
// other device's link is moved in and back (one move each way). Every call
// validates its input before touching anything, and calls for one device
// are serialized.
//
// The RPC entry is the trust boundary: each method checks its request once,
// there (a config with link.Validate, a prepared device with
// validatePrepared, a netns path), and the managers and the link package
// below trust what passed. The managers check their own fields again in
// Setup, as their contract says.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/services/provisioner/sriov"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/keylock"
)

// Mover moves links between the host and pod network namespaces (Attach,
// Detach) with their RDMA devices in the exclusive RDMA netns mode
// (AttachRDMA, DetachRDMA), and creates virtual links inside pod namespaces
// and deletes them there (Create, Remove); it is *link.Mover in production.
type Mover interface {
	Attach(ctx context.Context, hostIfName string, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error
	Detach(ctx context.Context, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error
	AttachRDMA(ctx context.Context, rdmaDevice, netnsPath string) error
	DetachRDMA(ctx context.Context, rdmaDevice, netnsPath string) error
	Create(ctx context.Context, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error
	Remove(ctx context.Context, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error
	CheckBack(ctx context.Context, orig *devicev1.LinkSnapshot, cfg *devicev1.DeviceConfig) error
	// ResumeLease keeps again the DHCP lease of a device an earlier run
	// attached with cfg (nothing without cfg's dhcp).
	ResumeLease(ctx context.Context, orig *devicev1.LinkSnapshot, netnsPath string, cfg *devicev1.DeviceConfig) error
	// ReadSettings reads what the host link has of the settings want
	// names (nil for none): what Detach restores.
	ReadSettings(ctx context.Context, hostIfName string, want *devicev1.LinkSettings) (*devicev1.LinkSettings, error)
	// HostNetns is a path to the host's network namespace.
	HostNetns() string
}

var _ Mover = (*link.Mover)(nil)

// Server is the provisioner service.
type Server struct {
	provisionerv1.UnimplementedProvisionerServiceServer
	log      *slog.Logger
	inv      *inventory
	managers *managers
	mover    Mover
	// locks serializes the calls for one device, and only for it: no
	// lock is shared across devices while a link moves.
	locks keylock.Set
	// programs puts netdra's eBPF programs on devices in pods, and
	// counters reads what they counted (SetPrograms).
	programs Programs
	counters CounterReader
	// sweeper takes netdra's programs off what no allocation holds
	// (sweep.go), alloc says what does.
	sweeper Sweeper
	alloc   allocated
	// life ends at Close: the background sweep stops.
	life context.Context
	stop context.CancelFunc
	// handles holds the pod netns of each device moved into one, until
	// it is out again (handles.go).
	handles netnsHandles
	// background counts the eBPF work Setup and Free leave running
	// (armPrograms, removeInBackground), which waits for the Setups and
	// Frees in flight (calls, foreground.go).
	background sync.WaitGroup
	calls      foreground
	arming     foreground // the programs being put on, or waiting to be
	jobsMu     sync.Mutex
	jobs       map[string]*bgJob // by device: the background work waiting its turn
	// bgTurn runs that work one device at a time: the kernel serializes
	// it (RTNL) anyway, and each call waiting in the kernel holds a
	// thread of ours (a burst of pods sets all their devices up at once).
	bgTurn sync.Mutex
	// moving bounds the links moved at once (Attach, Detach): the kernel
	// moves one at a time (RTNL), and each move in flight holds its own
	// netlink buffers and link dumps.
	moving slots
}

// MaxMoves is how many Attach and Detach calls move links at once; the
// others wait, in the order they came, as for the kernel's RTNL. nri
// starts every pod's attach as soon as its sandbox starts, so a burst of
// pods asks for all their devices at once; the kernel moves one link at a
// time anyway, and each call in flight holds its own netlink buffers and
// link dumps, so more than a few at once only add memory.
const MaxMoves = 8

var _ provisionerv1.ProvisionerServiceServer = (*Server)(nil)

// New returns a server with no manager running until Configure.
func New(log *slog.Logger, factories Factories, mover Mover) *Server {
	inv := newInventory()
	life, stop := context.WithCancel(context.Background())
	return &Server{
		log:    log,
		inv:    inv,
		life:   life,
		stop:   stop,
		mover:  mover,
		moving: make(slots, MaxMoves),
		managers: &managers{log: log, inv: inv, new: factories, vfs: newPreparedVFs(),
			running: map[devicev1.DeviceManager]*running{}, last: map[devicev1.DeviceManager]manager.Manager{},
			configured: make(chan struct{})},
	}
}

// errShutdown ends the watch streams when the provisioner stops.
var errShutdown = status.Error(codes.Unavailable, "provisioner shutting down")

// Wait waits for the eBPF work that Setup and Free left running in the
// background; call it once the server stopped serving.
func (s *Server) Wait() { s.background.Wait() }

// Close ends the WatchDevices streams and stops every manager. Idempotent.
func (s *Server) Close() {
	s.stop()
	s.inv.close()
	s.managers.stopAll()
	s.handles.closeAll()
}

// Configure implements ProvisionerServiceServer. A sysfs root that is set
// must be a clean absolute path to an existing directory, and the prepared
// VFs and devices listed must be device names; nothing changes otherwise.
// The lists replace the last ones (preparedVFs, allocated) before the
// managers are configured, whether their configuration is then taken or
// not; the first list of prepared devices starts a sweep (Sweep).
func (s *Server) Configure(_ context.Context, req *provisionerv1.ConfigureRequest) (*provisionerv1.ConfigureResponse, error) {
	if err := validateSysfsRoot("sysfsRoot", req.GetSysfsRoot()); err != nil {
		return nil, err
	}
	if err := validatePreparedList("preparedVfs", req.GetPreparedVfs().GetDevices()); err != nil {
		return nil, err
	}
	if err := validatePreparedList("preparedDevices", req.GetPreparedDevices().GetDevices()); err != nil {
		return nil, err
	}
	s.managers.vfs.list(req.GetPreparedVfs())
	s.listPrepared(req.GetPreparedDevices())
	st, err := s.managers.configure(req.GetManagers(), req.GetSysfsRoot())
	if err != nil {
		return nil, err
	}
	return &provisionerv1.ConfigureResponse{Managers: st}, nil
}

// WatchDevices implements ProvisionerServiceServer.
func (s *Server) WatchDevices(_ *provisionerv1.WatchDevicesRequest, stream provisionerv1.ProvisionerService_WatchDevicesServer) error {
	err := s.inv.watch(stream.Context(), stream.Send)
	if ctxErr := stream.Context().Err(); ctxErr != nil {
		return status.FromContextError(ctxErr).Err()
	}
	return err
}

// Setup implements ProvisionerServiceServer. The device must be in its
// running manager's inventory; the provisioner's own copy is what is set up.
//
// Trust boundary: the device is looked up by manager and name, and the
// config is checked here (validateConfig); the manager is given the
// provisioner's copy of the device and a config that passed.
func (s *Server) Setup(ctx context.Context, req *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
	kind, name := req.GetManager(), req.GetDeviceName()
	if err := validateDeviceRef("deviceName", name, "manager", kind); err != nil {
		return nil, err
	}
	mgr, dev, leave, err := s.setupTarget(ctx, kind, name, req.GetConfig())
	if err != nil {
		return nil, err
	}
	defer leave()
	dev, err = withShare(dev, req.GetShare())
	if err != nil {
		return nil, err
	}
	if err := validateConfig(mgr, dev, req.GetConfig()); err != nil {
		return nil, err
	}
	s.hurry(name, false)
	unlock, err := s.locks.Lock(ctx, name)
	if err != nil {
		return nil, err
	}
	// Counted once it holds the device: the background work that holds
	// it (the programs of its last Setup or Free) does not wait for it.
	exit := s.calls.enter()
	defer exit()
	settings, err := s.readSettings(ctx, dev, req.GetConfig())
	if err != nil {
		unlock()
		return nil, linkStatus(fmt.Errorf("setting up %s: %w", name, err))
	}
	pd, err := mgr.Setup(ctx, dev, req.GetConfig(), req.GetPool())
	if err != nil {
		unlock()
		return nil, fmt.Errorf("setting up %s: %w", name, err)
	}
	if settings != nil && pd.GetOriginalLink() != nil {
		pd.OriginalLink.Settings = settings
	}
	if kind == devicev1.DeviceManager_DEVICE_MANAGER_SRIOV {
		s.managers.vfs.prepared(name)
	}
	s.alloc.prepared(slot(pd))
	s.armPrograms(pd, req.GetConfig(), unlock)
	return &provisionerv1.SetupResponse{PreparedDevice: pd}, nil
}

// setupTarget waits until the managers are configured and kind's has
// discovered its devices, and returns kind's manager and the inventory's
// device of that name. For a VF it enters its PF first (leave, which Setup calls
// as it returns, lets the PF's VFs be re-created again) and refuses a VF
// not ready for cfg (Unavailable). Its errors are gRPC statuses; on one,
// nothing is held.
func (s *Server) setupTarget(ctx context.Context, kind devicev1.DeviceManager, name string, cfg *devicev1.DeviceConfig) (mgr manager.Manager, dev *devicev1.Device, leave func(), err error) {
	if err := s.managers.awaitConfigured(ctx); err != nil {
		return nil, nil, nil, err
	}
	mgr, ok := s.managers.forSetup(kind)
	if !ok {
		return nil, nil, nil, status.Errorf(codes.FailedPrecondition, "device manager %s is not running", kind)
	}
	// A manager that just started has not discovered its devices yet.
	if err := s.managers.awaitPublished(ctx, "manager", kind); err != nil {
		return nil, nil, nil, err
	}
	if dev, ok = s.inv.find(kind, name); !ok {
		return nil, nil, nil, status.Errorf(codes.NotFound, "device %s is not in the %s inventory", name, kind)
	}
	if kind != devicev1.DeviceManager_DEVICE_MANAGER_SRIOV {
		return mgr, dev, func() {}, nil
	}
	// Its PF's VFs are not re-created from here until it is counted as
	// prepared, and the inventory's copy is taken again: a re-creation
	// that held the PF until now published new VFs.
	pf := dev.GetPfName()
	leave = s.managers.vfs.enter(pf)
	if dev, ok = s.inv.find(kind, name); !ok || dev.GetPfName() != pf {
		leave()
		return nil, nil, nil, status.Errorf(codes.NotFound, "device %s is not in the %s inventory: the VFs of its PF %s were re-created", name, kind, pf)
	}
	if err := sriov.NotReady(dev, cfg); err != nil {
		leave()
		return nil, nil, nil, status.Error(codes.Unavailable, err.Error())
	}
	return mgr, dev, leave, nil
}

// Free implements ProvisionerServiceServer.
//
// Trust boundary: the prepared device is checked here (validatePrepared);
// the manager trusts it to be one its Setup returned.
func (s *Server) Free(ctx context.Context, req *provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
	pd := req.GetPreparedDevice()
	if err := validatePrepared("preparedDevice", pd); err != nil {
		return nil, err
	}
	kind, name := pd.GetDevice().GetManager(), pd.GetDevice().GetName()
	if err := s.managers.awaitConfigured(ctx); err != nil {
		return nil, err
	}
	mgr, ok := s.managers.forFree(kind)
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "device manager %s was never configured on this provisioner; it cannot free %s", kind, name)
	}
	s.hurry(name, true)
	unlock, err := s.locks.Lock(ctx, name)
	if err != nil {
		return nil, err
	}
	exit := s.calls.enter() // as in Setup
	defer exit()
	lost, err := s.takeBackAtFree(ctx, pd, req.GetConfig())
	if err == nil {
		err = mgr.Free(ctx, pd)
		if err != nil {
			err = fmt.Errorf("freeing %s: %w", name, err)
		}
	}
	if err != nil {
		unlock()
		return nil, err
	}
	s.alloc.freed(slot(pd))
	resp := &provisionerv1.FreeResponse{DeviceLost: lost}
	// A freed VF no longer keeps its PF's VFs from being re-created, once
	// nothing runs on it any more.
	freed := func() {}
	if kind == devicev1.DeviceManager_DEVICE_MANAGER_SRIOV {
		freed = func() { s.managers.vfs.freed(name) }
	}
	if s.programs != nil && movesWhole(pd) {
		s.removeInBackground(pd, func() { unlock(); freed() })
		return resp, nil
	}
	defer unlock()
	if s.programs != nil {
		if err := s.programs.Remove(slot(pd)); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	freed()
	return resp, nil
}

// Attach implements ProvisionerServiceServer. A dummy device's link is
// created in the pod (no namespace move); any other device's link is moved
// there from the host (one move), and the server keeps a handle on the
// pod's netns until the link is out again (netnsHandles). A device with no
// kernel interface (a vfio-bound VF) has nothing to move: it is used
// through its device node, so Attach only validates.
//
// An Attach runs to its end even when its caller goes away meanwhile (a
// timeout), and is then undone, unless an earlier Attach had put the
// device there: the caller counts it as failed, and a device left in a
// netns the runtime is about to tear down would be lost.
//
// Trust boundary: move (validateMove); the link package trusts what
// passed.
func (s *Server) Attach(ctx context.Context, req *provisionerv1.AttachRequest) (*provisionerv1.AttachResponse, error) {
	pd := req.GetPreparedDevice()
	run := context.WithoutCancel(ctx)
	err := s.move(ctx, pd, req.GetNetnsPath(), req.GetConfig(), func() error {
		attached, err := s.takeBackFromElsewhere(run, pd, req.GetNetnsPath())
		if err != nil {
			return err
		}
		if err := s.attach(run, req); err != nil {
			return err
		}
		if ctx.Err() == nil || attached {
			return nil
		}
		_, derr := s.detach(run, pd, req.GetNetnsPath(), req.GetConfig())
		s.log.Warn("Attach undone: its caller went away", "device", pd.GetDevice().GetName(), "reason", ctx.Err(), "undoError", derr)
		return status.FromContextError(ctx.Err()).Err()
	})
	if err != nil {
		return nil, err
	}
	return &provisionerv1.AttachResponse{PreparedDevice: pd}, nil
}

// attach is Attach of a device with a kernel interface: the link into the
// pod, then the eBPF programs on it; beside them, the handle on its netns
// (its pin's fsync and bind mount need nothing of the link's), dropped
// again when the attach fails.
func (s *Server) attach(ctx context.Context, req *provisionerv1.AttachRequest) error {
	pd, cfg := req.GetPreparedDevice(), req.GetConfig()
	pol, err := s.policy(pd, cfg)
	if err != nil {
		return err
	}
	kept := s.keepHandle(pd, req.GetNetnsPath(), cfg)
	err = s.attachLink(ctx, pd, req.GetNetnsPath(), cfg)
	if err != nil {
		err = linkStatus(fmt.Errorf("attaching %s: %w", pd.GetDevice().GetName(), err))
	} else {
		err = s.attachPrograms(ctx, req, pol)
	}
	kept(err == nil)
	return err
}

// keepHandle starts keeping a handle on the pod netns at path for pd's
// device, unless its link is created in the pod (it dies with its netns:
// nothing to keep). The returned func waits for it, and drops it again
// when the attach did not hold (ok false).
func (s *Server) keepHandle(pd *devicev1.PreparedDevice, path string, cfg *devicev1.DeviceConfig) (kept func(ok bool)) {
	if createdInPod(pd) {
		return func(bool) {}
	}
	name := pd.GetDevice().GetName()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pinErr, err := s.handles.keep(pd, path, cfg)
		if err != nil {
			s.log.Warn("no handle on the pod's netns: a runtime that tears it down unannounced loses the device", "device", name, "error", err)
		} else if pinErr != nil {
			s.log.Warn("the pod's netns is not pinned: a runtime that tears it down unannounced while the provisioner restarts loses the device", "device", name, "error", pinErr)
		}
	}()
	return func(ok bool) {
		<-done
		if ok {
			return
		}
		if err := s.handles.drop(name); err != nil {
			s.log.Error("Netns pin left after a failed attach: it keeps the pod's netns until the next Detach, Free or start", "device", name, "error", err)
		}
	}
}

// Detach implements ProvisionerServiceServer: a created dummy link is
// deleted in the pod, any other link moved back to the host, through the
// handle Attach kept when there is one (the runtime may have removed the
// netns path already). A device found lost (its netns gone with no handle,
// its link nowhere) is reported in the response and the log. A device
// whose handle is on another pod's netns than the request names (taken
// back from that pod and attached to another since: a late Detach) is
// left where it is, and the Detach is done.
//
// Trust boundary: move (validateMove); the link package trusts what
// passed.
func (s *Server) Detach(ctx context.Context, req *provisionerv1.DetachRequest) (*provisionerv1.DetachResponse, error) {
	pd := req.GetPreparedDevice()
	var lost bool
	err := s.move(ctx, pd, req.GetNetnsPath(), req.GetConfig(), func() (err error) {
		if held, ok := s.handles.elsewhere(pd.GetDevice().GetName(), req.GetNetnsPath()); ok {
			s.log.Info("Detach left the device where it is: it is in another pod's netns now, taken back from this one since",
				"device", pd.GetDevice().GetName(), "netns", req.GetNetnsPath(), "in", held)
			return nil
		}
		lost, err = s.detach(ctx, pd, req.GetNetnsPath(), req.GetConfig())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &provisionerv1.DetachResponse{DeviceLost: lost}, nil
}

// detach is Detach of a device with a kernel interface: the eBPF programs
// off it (not off a link that moves whole: they go back to the host with
// it and stay until Free, see armPrograms), then the link out of the pod
// (at the held netns when there is a handle, else at netnsPath), then the
// handle closed. It reports a lost device as done: one whose netns went
// with its link, or one whose link was destroyed under the pod.
func (s *Server) detach(ctx context.Context, pd *devicev1.PreparedDevice, netnsPath string, cfg *devicev1.DeviceConfig) (lost bool, err error) {
	name := pd.GetDevice().GetName()
	if held, _, ok := s.handles.path(name); ok {
		netnsPath = held
	}
	if s.programs != nil && !movesWhole(pd) { // a moved link keeps them until Free
		if err := s.programs.Detach(slot(pd)); err != nil {
			return false, status.Error(codes.Internal, err.Error())
		}
	}
	err = s.detachLink(ctx, pd, netnsPath, cfg)
	switch {
	case errors.Is(err, link.ErrLinkLost):
		s.log.Error("Device lost: its pod's netns is gone and its link with it; the runtime tore the pod down without a Detach while the provisioner held no handle (it restarted)",
			"device", name, "manager", pd.GetDevice().GetManager(), "error", err)
		lost, err = true, nil
	case errors.Is(err, link.ErrLinkNotFound) && movesWhole(pd):
		// No Detach can bring it back, so none is asked again: its
		// manager no longer offers it either.
		s.log.Error("Device lost: its link is in neither its pod's netns nor the host, destroyed under the pod (a VF whose PF's sriov_numvfs was lowered, a link deleted)",
			"device", name, "manager", pd.GetDevice().GetManager(), "error", err)
		lost, err = true, nil
	}
	if err != nil {
		return false, linkStatus(fmt.Errorf("detaching %s: %w", name, err))
	}
	if err := s.handles.drop(name); err != nil {
		s.log.Error("Netns pin left: it keeps the pod's netns until the next Detach, Free or start", "device", name, "error", err)
	}
	return lost, nil
}

// takeBackFromElsewhere is Attach's first step for a device whose handle
// is on another pod netns than netnsPath (no Detach came for the pod it
// was in: a sandbox the runtime tore down unannounced, then made again):
// the device is taken back from there first, so that it can move. It
// reports whether the device is in netnsPath already, put there by an
// earlier Attach that returned.
func (s *Server) takeBackFromElsewhere(ctx context.Context, pd *devicev1.PreparedDevice, netnsPath string) (attached bool, err error) {
	same, held := s.handles.holds(pd.GetDevice().GetName(), netnsPath)
	if !held || same {
		return same, nil
	}
	if _, err := s.takeBack(ctx, pd, "before attaching it to "+netnsPath); err != nil {
		return false, err
	}
	return false, nil
}

// takeBackAtFree is Free's first step. A device still in a pod's netns (a
// handle is held: no Detach came, as when the runtime tore the pod down
// without telling nri) is detached through the handle. Without a handle
// (none was needed, or the provisioner restarted since the Attach), a link
// that moved into a pod must be back in the host: a physical one the
// kernel returned under its pod name is renamed back, and a virtual one
// destroyed with its pod's netns is reported lost (checkBack).
func (s *Server) takeBackAtFree(ctx context.Context, pd *devicev1.PreparedDevice, freeCfg *devicev1.DeviceConfig) (lost bool, err error) {
	if _, _, held := s.handles.path(pd.GetDevice().GetName()); !held {
		return s.checkBack(ctx, pd, freeCfg)
	}
	return s.takeBack(ctx, pd, "before freeing it")
}

// takeBack detaches a device through the handle on the pod netns it is
// still in (when says at which step); nothing without a handle. lost says
// the link was not there either.
func (s *Server) takeBack(ctx context.Context, pd *devicev1.PreparedDevice, when string) (lost bool, err error) {
	_, cfg, ok := s.handles.path(pd.GetDevice().GetName())
	if !ok {
		return false, nil
	}
	s.log.Warn("Device still in a pod's netns, no Detach came: taking it back", "device", pd.GetDevice().GetName(), "when", when)
	if lost, err = s.detach(ctx, pd, "", cfg); err != nil {
		return false, fmt.Errorf("taking %s back from its pod %s: %w", pd.GetDevice().GetName(), when, err)
	}
	return lost, nil
}

// checkBack is takeBackAtFree without a handle (see there).
func (s *Server) checkBack(ctx context.Context, pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) (lost bool, err error) {
	if pd.GetDevice().GetKernelIfName() == "" || pd.GetDevice().GetSubInterface() != nil || createdInPod(pd) || pd.GetOriginalLink().GetName() == "" {
		return false, nil // nothing moved, or a link made in the pod that went with it
	}
	err = s.mover.CheckBack(ctx, pd.GetOriginalLink(), cfg)
	if errors.Is(err, link.ErrLinkLost) {
		s.log.Error("Device lost: its link is not back in the host at Free and the provisioner holds no handle on its pod's netns (it restarted since the Attach): a virtual link destroyed with a netns the runtime tore down without a Detach",
			"device", pd.GetDevice().GetName(), "manager", pd.GetDevice().GetManager(), "error", err)
		return true, nil
	}
	if err != nil {
		return false, linkStatus(fmt.Errorf("checking that %s is back in the host: %w", pd.GetDevice().GetName(), err))
	}
	return false, nil
}

// Restore implements ProvisionerServiceServer: it parses the prepared
// device as the claim status holds it (protojson, unknown fields refused),
// checks it as a request's (validatePrepared), then against what the
// provisioner offers now (checkRestored: its manager's inventory, the
// device's identity, what that manager's Setup records). The answer's
// device is the inventory's copy. The trust boundary for a prepared device
// read back from a claim status is here.
func (s *Server) Restore(ctx context.Context, req *provisionerv1.RestoreRequest) (*provisionerv1.RestoreResponse, error) {
	if len(req.GetData()) == 0 {
		return nil, fielderr.New("data", "required")
	}
	pd := &devicev1.PreparedDevice{}
	if err := protojson.Unmarshal(req.GetData(), pd); err != nil {
		return nil, fielderr.New("data", "not a serialized prepared device: %v", err)
	}
	if err := validatePrepared("data", pd); err != nil {
		return nil, err
	}
	if err := s.checkRestored(ctx, "data", pd); err != nil {
		return nil, err
	}
	if pd.GetDevice().GetManager() == devicev1.DeviceManager_DEVICE_MANAGER_SRIOV {
		s.managers.vfs.restored(pd.GetDevice().GetName())
	}
	s.alloc.prepared(slot(pd))
	return &provisionerv1.RestoreResponse{PreparedDevice: pd}, nil
}

// move checks an Attach or Detach of pd (validateMove), takes the device's
// lock and, when the device has a kernel interface, runs f, which moves it;
// a device without one (a vfio-bound VF) has nothing to move.
func (s *Server) move(ctx context.Context, pd *devicev1.PreparedDevice, netnsPath string, cfg *devicev1.DeviceConfig, f func() error) error {
	if err := s.validateMove(pd, netnsPath, cfg); err != nil {
		return err
	}
	s.hurry(pd.GetDevice().GetName(), false)
	unlock, err := s.locks.Lock(ctx, pd.GetDevice().GetName())
	if err != nil {
		return err
	}
	defer unlock()
	if pd.GetDevice().GetKernelIfName() == "" {
		return nil
	}
	release, err := s.moving.take(ctx)
	if err != nil {
		return err
	}
	defer release()
	return f()
}

// slots is a counting semaphore: its capacity is how many may hold one.
type slots chan struct{}

// take waits for a slot, within ctx, and returns its release.
func (sl slots) take(ctx context.Context) (release func(), err error) {
	select {
	case sl <- struct{}{}:
		return func() { <-sl }, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// linkStatus gives the link package's errors their status codes.
func linkStatus(err error) error {
	var code codes.Code
	switch {
	case errors.Is(err, fielderr.ErrInvalid):
		return err
	case errors.Is(err, link.ErrNameClash):
		code = codes.AlreadyExists
	case errors.Is(err, link.ErrLinkNotFound), errors.Is(err, link.ErrRDMANotFound):
		code = codes.NotFound
	case errors.Is(err, netlinkns.ErrNotNetns), errors.Is(err, link.ErrHostNetns), errors.Is(err, link.ErrParentNotFound), errors.Is(err, link.ErrRDMANotMovable),
		errors.Is(err, link.ErrNoLease):
		code = codes.FailedPrecondition
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		code = codes.Internal
	}
	return status.Error(code, err.Error())
}
