package server

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/managername"
)

// Programs puts netdra's eBPF programs (counters, software VLAN, spoof
// check) on devices in pods and takes them off; it is *ebpf.Programs in
// production.
type Programs interface {
	// Attach puts the programs on ifName in the netns at netnsPath with
	// policy pol; idempotent. ebpf.ErrNotSupported on a kernel without tcx.
	Attach(ctx context.Context, device, netnsPath, ifName string, pol ebpf.Policy) error
	// Detach takes the device's programs off its interface, keeping the
	// counters; idempotent.
	Detach(device string) error
	// Remove takes off and forgets everything of the device, counters
	// included; idempotent.
	Remove(device string) error
}

// CounterReader reads what the programs counted; it is *ebpf.Programs in
// production.
type CounterReader interface {
	// Counters reads one device's counters; ebpf.ErrNotAttached for a
	// device without programs.
	Counters(device string) (ebpf.Counters, error)
	// Devices lists the devices with programs.
	Devices() ([]string, error)
}

var (
	_ Programs      = (*ebpf.Programs)(nil)
	_ CounterReader = (*ebpf.Programs)(nil)
)

// SetPrograms makes Attach put p's programs on every device with a kernel
// interface, Detach and Free take them off, and DeviceCounters read c.
// Without it (tests of the moves alone), devices get no programs, a claim
// asking for software VLAN or spoof check is refused and DeviceCounters is
// FailedPrecondition. Call it before serving.
func (s *Server) SetPrograms(p Programs, c CounterReader) { s.programs, s.counters = p, c }

// policy is what the programs enforce on pd's device for cfg: the VLAN and
// spoof check in software for the managers whose hardware has none (host,
// dummy); counting only for an SR-IOV VF, whose PF enforces them.
func (s *Server) policy(pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) (ebpf.Policy, error) {
	if pd.GetDevice().GetManager() == devicev1.DeviceManager_DEVICE_MANAGER_SRIOV {
		return ebpf.Policy{}, nil
	}
	soft := softwareConfig(pd, cfg).GetVlan() != 0 || cfg.GetSpoofChk()
	if cfg.GetEbpfDisabled() {
		if soft {
			return ebpf.Policy{}, fielderr.New("config.ebpfPrograms", "a %s device enforces vlan and spoofChk with netdra's eBPF programs, which the claim turns off",
				managername.Of(pd.GetDevice().GetManager()))
		}
		return ebpf.Policy{}, nil
	}
	if s.programs == nil {
		if soft {
			return ebpf.Policy{}, status.Error(codes.FailedPrecondition, "software VLAN and spoof check need the provisioner's eBPF programs, which are not set up")
		}
		return ebpf.Policy{}, nil
	}
	pol, err := ebpf.SoftwarePolicy(softwareConfig(pd, cfg), pd.GetOriginalLink().GetMacAddress())
	if err != nil {
		return ebpf.Policy{}, fielderr.New("config.spoofChk", "%v", err)
	}
	return pol, nil
}

// movesWhole reports whether pd's link is moved into the pod and back as
// it is (a host interface, a veth, an SR-IOV VF's netdev), rather than
// created for the pod (a dummy, a sub-interface) or not a link at all (a
// vfio-bound VF).
func movesWhole(pd *devicev1.PreparedDevice) bool {
	dev := pd.GetDevice()
	return dev.GetKernelIfName() != "" && dev.GetSubInterface() == nil && dev.GetShare() == nil && !createdInPod(pd)
}

// armPrograms puts the programs on a link that moves whole while it is
// still in the host, right after its Setup: tcx keeps them through the
// namespace moves, so that Attach only checks they are there and sets the
// policy, and Detach leaves them on. Each tcx attachment and detachment
// waits for an RCU grace period, which on some kernels is most of an
// attach's cost; here it is paid at prepare instead of in the runtime's RunPodSandbox hook, which blocks
// every pod of the node while it runs. It runs in the background, holding
// the device's lock that Setup hands over (unlock), so an Attach or Free
// of the device waits for it; it starts once no Setup or Free has run
// for a moment (foreground.go: their RTNL waits went behind it), or at
// once when a call for the device comes, and not at all when a Free
// does. A failure is logged and changes nothing: Attach then puts the
// programs on in the pod, and fails closed if it cannot.
func (s *Server) armPrograms(pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig, unlock func()) {
	if s.programs == nil || !movesWhole(pd) || cfg.GetEbpfDisabled() {
		unlock()
		return
	}
	pol, err := s.policy(pd, cfg)
	if err != nil {
		unlock() // Attach refuses it
		return
	}
	host, ifName := s.mover.HostNetns(), pd.GetDevice().GetKernelIfName()
	s.inBackground(pd.GetDevice().GetName(), true, unlock, func() {
		err := s.programs.Attach(context.Background(), slot(pd), host, ifName, pol)
		switch {
		case errors.Is(err, ebpf.ErrNotSupported): // a kernel without tcx: Attach says what it means
			s.log.Debug("eBPF programs not put on the device at prepare", "device", pd.GetDevice().GetName(), "error", err)
		case err != nil:
			s.log.Warn("eBPF programs not put on the device at prepare; Attach puts them on in the pod", "device", pd.GetDevice().GetName(), "interface", ifName, "error", err)
		}
	})
}

// removeInBackground is Free's last step for a link that moved whole:
// netdra's programs and counters taken off it. It carries its programs
// until here (armPrograms), and their two tcx detachments wait for RCU
// grace periods under the kernel's RTNL; so they are taken off in the background, holding the device's lock that Free
// hands over (unlock): the next Setup, Attach or Free of the device waits
// for it, the kubelet's unprepare does not. It waits for the programs
// being put on and the Setups and Frees in flight (foreground.go), or
// for a call for the device. A failure is logged; the next
// Setup's armPrograms finds what is left and reuses or replaces it, and a
// provisioner killed before the removal leaves them to the sweep of its
// next start.
func (s *Server) removeInBackground(pd *devicev1.PreparedDevice, unlock func()) {
	s.inBackground(pd.GetDevice().GetName(), false, unlock, func() {
		if err := s.programs.Remove(slot(pd)); err != nil {
			s.log.Error("eBPF programs of a freed device not removed: they stay on its link until it is set up again", "device", pd.GetDevice().GetName(), "error", err)
		}
	})
}

// attachPrograms is Attach's last step: the programs go on the device in
// the pod, unless its claim turns them off (ebpfPrograms: false); when they
// cannot, the device is taken out again (fail closed: moved back to the
// host, or deleted when it was created in the pod), except on a kernel
// without tcx for a device that only gets counters.
// A kernel without tcx is FailedPrecondition, other failures Internal.
func (s *Server) attachPrograms(ctx context.Context, req *provisionerv1.AttachRequest, pol ebpf.Policy) error {
	pd, cfg := req.GetPreparedDevice(), req.GetConfig()
	if s.programs == nil || cfg.GetEbpfDisabled() {
		return nil
	}
	podIf := cfg.GetPodIfName()
	if podIf == "" {
		podIf = pd.GetDevice().GetKernelIfName()
	}
	err := s.programs.Attach(ctx, slot(pd), req.GetNetnsPath(), podIf, pol)
	if err == nil {
		return nil
	}
	if errors.Is(err, ebpf.ErrNotSupported) && !pol.Enforces() {
		// A kernel without tcx: the device goes without counters rather
		// than not at all, since nothing but counting was asked.
		s.log.Warn("device attached without eBPF counters", "device", pd.GetDevice().GetName(), "error", err)
		return nil
	}
	code := codes.Internal
	if errors.Is(err, ebpf.ErrNotSupported) {
		code = codes.FailedPrecondition
	}
	if derr := s.detachLink(context.WithoutCancel(ctx), pd, req.GetNetnsPath(), cfg); derr != nil {
		err = errors.Join(err, fmt.Errorf("taking it out of the pod: %w", derr))
	}
	return status.Error(code, err.Error())
}

// DeviceCounters implements ProvisionerServiceServer.
func (s *Server) DeviceCounters(_ context.Context, req *provisionerv1.DeviceCountersRequest) (*provisionerv1.DeviceCountersResponse, error) {
	for i, name := range req.GetDevices() {
		if !dnsLabel.MatchString(name) {
			return nil, fielderr.New(fmt.Sprintf("devices[%d]", i), "%q is not a device name (a DNS label)", name)
		}
	}
	if s.counters == nil {
		return nil, status.Error(codes.FailedPrecondition, "the provisioner runs without eBPF programs")
	}
	names := slices.Clone(req.GetDevices())
	if len(names) == 0 {
		all, err := s.counters.Devices()
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		names = all
	}
	slices.Sort(names)
	resp := &provisionerv1.DeviceCountersResponse{}
	for i, name := range slices.Compact(names) {
		c, err := s.counters.Counters(name)
		switch {
		case errors.Is(err, ebpf.ErrNotAttached) && len(req.GetDevices()) > 0:
			return nil, status.Errorf(codes.NotFound, "devices[%d]: %s has no counters: %v", i, name, err)
		case errors.Is(err, ebpf.ErrNotAttached):
			continue // freed while listing
		case err != nil:
			return nil, status.Error(codes.Internal, err.Error())
		}
		resp.Devices = append(resp.Devices, &provisionerv1.DeviceCounters{
			Device:    name,
			RxPackets: c.RxPackets, RxBytes: c.RxBytes,
			TxPackets: c.TxPackets, TxBytes: c.TxBytes,
			Drops: []*provisionerv1.PolicyDrops{
				{Policy: "spoofChk", Packets: c.SpoofDropPackets, Bytes: c.SpoofDropBytes},
				{Policy: "vlan", Packets: c.VlanDropPackets, Bytes: c.VlanDropBytes},
			},
		})
	}
	return resp, nil
}
