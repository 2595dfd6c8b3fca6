package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/services/dra/slicepool"
	"github.com/netdra/netdra/shared/claimconfig"
	"github.com/netdra/netdra/shared/fielderr"
)

// deviceRef names an allocated device of this driver: for a device many
// claims share (allocated with a share ID), the share, and the bandwidth
// it consumes (bits per second).
type deviceRef struct {
	request   string
	pool      string
	device    string
	shareID   *string
	bandwidth uint64
}

// key is the state's key of the device's allocation, as a string (rowKey).
func (r deviceRef) key() string { return keyString(r.pool, r.device, ptr.Deref(r.shareID, "")) }

// allocKey is the state's key of the device's allocation: pool, device
// and share ID (empty for a device one claim holds).
func (r deviceRef) allocKey() *statev1.AllocationKey {
	return &statev1.AllocationKey{Pool: r.pool, DeviceName: r.device, ShareId: ptr.Deref(r.shareID, "")}
}

// share is what Setup gets of a shared device's allocation; nil for a
// device one claim holds.
func (r deviceRef) share() *devicev1.Share {
	if r.shareID == nil {
		return nil
	}
	return &devicev1.Share{Id: *r.shareID, Bandwidth: r.bandwidth}
}

// rowKey is an allocation row's key as a string, as deviceRef.key.
func rowKey(row *statev1.Allocation) string {
	return keyString(row.GetPool(), row.GetDeviceName(), row.GetShareId())
}

func keyString(pool, device, share string) string {
	if share != "" {
		return pool + "/" + device + "/" + share
	}
	return pool + "/" + device
}

// consumedBandwidth is the bandwidth a shared device's allocation
// consumes (bits per second), from the result's consumedCapacity, which
// the scheduler sets for every allocation of a device with consumable
// capacity; 0 for a device not shared (no share ID). A share without it,
// or not a whole positive number, is an error naming the field.
func consumedBandwidth(r *resourceapi.DeviceRequestAllocationResult) (uint64, error) {
	q, ok := r.ConsumedCapacity[publish.CapacityBandwidth]
	switch {
	case r.ShareID == nil && !ok:
		return 0, nil
	case r.ShareID == nil:
		return 0, fielderr.New("consumedCapacity.bandwidth", "set, but the device is not allocated as a share (no shareID)")
	case !ok:
		return 0, fielderr.New("consumedCapacity.bandwidth", "required: device %s is allocated as a share (shareID %s) and consumes a bandwidth", r.Device, *r.ShareID)
	}
	v, whole := q.AsInt64()
	if !whole || v <= 0 {
		return 0, fielderr.New("consumedCapacity.bandwidth", "%s is not a whole positive number of bits per second", q.String())
	}
	return uint64(v), nil
}

// plannedDevice is a device of the claim with the config it gets.
type plannedDevice struct {
	deviceRef
	config *devicev1.DeviceConfig
}

// preparation is what preparing a claim means, checked before anything is
// touched.
type preparation struct {
	claim   *resourceapi.ResourceClaim
	podUID  string
	podName string
	devices []plannedDevice

	// steps times the prepare's steps, for its log line: where a slow
	// prepare's time went.
	steps steps
	// unlockPod ends the hold of the pod's lock, which the prepare takes
	// before it reads the pod's allocations and keeps until its intents are
	// recorded (begin), so that two claims of one pod cannot both take an
	// interface name. Idempotent.
	unlockPod func()
}

// steps records how long each step of a prepare took.
type steps struct {
	last time.Time
	b    strings.Builder
}

// start starts the clock of the first step.
func (s *steps) start() { s.last = time.Now() }

// done ends the step named name and starts the next.
func (s *steps) done(name string) {
	now := time.Now()
	if s.b.Len() > 0 {
		s.b.WriteByte(' ')
	}
	fmt.Fprintf(&s.b, "%s=%.1fms", name, float64(now.Sub(s.last).Microseconds())/1000)
	s.last = now
}

// String is the steps and their times: "pod=1.2ms list=0.3ms ...".
func (s *steps) String() string { return s.b.String() }

// makePreparation checks the claim and parses its config without touching the
// node or the state: the results of this driver, one pod (checkPod reads
// it), and a valid config for each request.
func (d *Driver) makePreparation(claim *resourceapi.ResourceClaim) (*preparation, error) {
	alloc := claim.Status.Allocation
	if alloc == nil {
		return nil, ErrNotAllocated
	}
	p := &preparation{claim: claim}
	p.steps.start()
	for _, r := range alloc.Devices.Results {
		if r.Driver != d.name {
			continue
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			return nil, fmt.Errorf("request %q, device %s: %w", r.Request, r.Device, ErrAdminAccess)
		}
		pool, err := slicepool.Of(d.node, r.Pool)
		if err != nil {
			return nil, fmt.Errorf("request %q, device %s: %w", r.Request, r.Device, err)
		}
		ref := deviceRef{request: r.Request, pool: pool, device: r.Device}
		if r.ShareID != nil {
			s := string(*r.ShareID)
			ref.shareID = &s
		}
		bw, err := consumedBandwidth(&r)
		if err != nil {
			return nil, fmt.Errorf("request %q, device %s: %w", r.Request, r.Device, err)
		}
		ref.bandwidth = bw
		cfg, err := d.configFor(alloc.Devices.Config, r.Request)
		if err != nil {
			return nil, err
		}
		p.devices = append(p.devices, plannedDevice{deviceRef: ref, config: cfg})
	}
	if len(p.devices) == 0 {
		return p, nil
	}
	if err := p.podFromClaim(); err != nil {
		return nil, err
	}
	return p, nil
}

// podFromClaim sets the preparation's pod from reservedFor, which must name
// exactly one pod.
func (p *preparation) podFromClaim() error {
	claim := p.claim
	var names []string
	for _, r := range claim.Status.ReservedFor {
		names = append(names, r.Resource+"/"+r.Name)
	}
	if len(names) != 1 {
		if len(names) == 0 {
			return fmt.Errorf("%w; it is reserved for none", ErrNotOnePod)
		}
		return fmt.Errorf("%w; it is reserved for %d: %s", ErrNotOnePod, len(names), strings.Join(names, ", "))
	}
	ref := claim.Status.ReservedFor[0]
	if ref.APIGroup != "" || ref.Resource != "pods" || ref.UID == "" {
		return fmt.Errorf("%w; it is reserved for %s", ErrNotOnePod, names[0])
	}
	p.podUID, p.podName = string(ref.UID), claim.Namespace+"/"+ref.Name
	return nil
}

// checkPod refuses the preparation's pod when it is not the one the claim
// is reserved for or it is on the host network. It reads the pod from the
// apiserver, and so runs beside the prepare's reads of the state (reads).
func (d *Driver) checkPod(ctx context.Context, p *preparation) error {
	if d.podLookup == nil {
		return nil
	}
	ref := p.claim.Status.ReservedFor[0]
	pod, err := d.podLookup(ctx, p.claim.Namespace, ref.Name, ref.UID)
	if err != nil {
		return fmt.Errorf("looking up pod %s: %w", p.podName, err)
	}
	if pod.UID != ref.UID {
		return fmt.Errorf("%w: pod %s is %s, not the %s the claim is reserved for", errWrongPod, p.podName, pod.UID, ref.UID)
	}
	if pod.Spec.HostNetwork {
		return fmt.Errorf("pod %s: %w", p.podName, ErrHostNetwork)
	}
	return nil
}

// configFor returns the config of request: the opaque parameters of every
// config entry of this driver that applies to the request (lists it, lists
// its main request, or lists none), merged key by key in order (class
// entries come before the claim's, so the claim's win; a null value unsets
// a key), then parsed strictly by claimconfig. The error names the request
// and the parameter ("request \"net\": config.vlan: 5000 is out of range").
func (d *Driver) configFor(configs []resourceapi.DeviceAllocationConfiguration, request string) (*devicev1.DeviceConfig, error) {
	var raws [][]byte
	for _, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != d.name || !appliesTo(c.Requests, request) {
			continue
		}
		raw := c.Opaque.Parameters.Raw
		if raw == nil && c.Opaque.Parameters.Object != nil {
			var err error
			if raw, err = json.Marshal(c.Opaque.Parameters.Object); err != nil {
				return nil, fmt.Errorf("request %q: config: %w", request, err)
			}
		}
		raws = append(raws, raw)
	}
	merged, err := claimconfig.MergeParams(raws)
	if err == nil {
		var cfg *devicev1.DeviceConfig
		if cfg, err = claimconfig.Parse(merged); err == nil {
			if err = fitsStatus(cfg); err == nil {
				return cfg, nil
			}
		}
	}
	return nil, fmt.Errorf("request %q: %w", request, fielderr.Prefix("config", err))
}

// maxStatusIPs is how many IPs a claim status entry's networkData holds.
const maxStatusIPs = claimconfig.MaxStatusIPs

// fitsStatus checks what the claim status must be able to hold: the
// addresses go to networkData.ips, a set of at most 16.
func fitsStatus(cfg *devicev1.DeviceConfig) error {
	if n := len(cfg.GetAddresses()); n > maxStatusIPs {
		return fielderr.New("addresses", "%d addresses; a claim status holds at most %d", n, maxStatusIPs)
	}
	seen := map[string]bool{}
	for i, a := range cfg.GetAddresses() {
		if seen[a] {
			return fielderr.New(fmt.Sprintf("addresses[%d]", i), "%s is given twice", a)
		}
		seen[a] = true
	}
	return nil
}

// appliesTo reports whether a config entry listing requests applies to the
// result's request ("main" or "main/sub").
func appliesTo(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	main, _, _ := strings.Cut(request, "/")
	for _, r := range requests {
		if r == request || r == main {
			return true
		}
	}
	return false
}
