package sriov

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// VLAN protocols (ethertypes) and VF link states as the kernel has them.
const (
	protoQ  uint16 = 0x8100 // 802.1Q
	protoAD uint16 = 0x88a8 // 802.1ad

	linkStateAuto    uint32 = 0 // netlink.VF_LINK_STATE_AUTO
	linkStateEnable  uint32 = 1 // netlink.VF_LINK_STATE_ENABLE
	linkStateDisable uint32 = 2 // netlink.VF_LINK_STATE_DISABLE
)

// vfState is a VF's admin settings on its PF, in the kernel's terms.
type vfState struct {
	MAC       net.HardwareAddr
	Vlan      uint32
	Qos       uint32
	Proto     uint16 // ethertype; 0 (unreported) means 802.1Q
	SpoofChk  bool
	Trust     bool
	LinkState uint32 // linkState*
	MinTxRate uint32 // Mbps, 0 = no limit
	MaxTxRate uint32
}

// setting is one VF setting the PF applies in one call. Setup applies them
// in this order.
type setting int

const (
	settingVlan      setting = iota // Vlan, Qos and Proto together
	settingMAC                      // MAC
	settingSpoofChk                 // SpoofChk
	settingTrust                    // Trust
	settingLinkState                // LinkState
	settingRate                     // MinTxRate and MaxTxRate together
	numSettings
)

func (s setting) String() string {
	return [...]string{"vlan", "mac", "spoofchk", "trust", "link state", "tx rate"}[s]
}

// same reports whether a and b agree on setting s.
func (s setting) same(a, b vfState) bool {
	switch s {
	case settingVlan:
		return a.Vlan == b.Vlan && a.Qos == b.Qos && normProto(a.Proto) == normProto(b.Proto)
	case settingMAC:
		return bytes.Equal(a.MAC, b.MAC)
	case settingSpoofChk:
		return a.SpoofChk == b.SpoofChk
	case settingTrust:
		return a.Trust == b.Trust
	case settingLinkState:
		return a.LinkState == b.LinkState
	case settingRate:
		return a.MinTxRate == b.MinTxRate && a.MaxTxRate == b.MaxTxRate
	}
	return false
}

// describe formats s's value in st, for logs and errors.
func (s setting) describe(st vfState) string {
	switch s {
	case settingVlan:
		return fmt.Sprintf("vlan %d qos %d proto %#04x", st.Vlan, st.Qos, normProto(st.Proto))
	case settingMAC:
		return "mac " + st.MAC.String()
	case settingSpoofChk:
		return fmt.Sprintf("spoofchk %t", st.SpoofChk)
	case settingTrust:
		return fmt.Sprintf("trust %t", st.Trust)
	case settingLinkState:
		return fmt.Sprintf("link state %d", st.LinkState)
	case settingRate:
		return fmt.Sprintf("min_tx_rate %d max_tx_rate %d", st.MinTxRate, st.MaxTxRate)
	}
	return s.String()
}

func normProto(p uint16) uint16 {
	if p == protoAD {
		return protoAD
	}
	return protoQ
}

// pfLinks is every netlink call the manager makes: reading a VF's settings
// from its PF, changing one of them, and reading a link's identity. The real
// one is netlinkLinks; tests use a fake.
type pfLinks interface {
	// VF returns the settings of VF vf of the PF pf. A PF that does not
	// exist is ErrPFNotFound; a VF index the PF does not have,
	// ErrVFNotFound.
	VF(pf string, vf int) (vfState, error)
	// SetVF applies setting s of VF vf of pf to its value in want.
	SetVF(pf string, vf int, s setting, want vfState) error
	// Link returns the identity of the host link name (name, MAC, MTU, up).
	Link(name string) (*devicev1.LinkSnapshot, error)
}

// vfOf returns dev's PF name and VF index, or ErrNotVF.
func vfOf(dev *devicev1.Device) (string, int, error) {
	if dev.GetPfName() == "" || dev.VfIndex == nil || dev.GetVfIndex() < 0 {
		return "", 0, fmt.Errorf("device %s: %w", dev.GetName(), ErrNotVF)
	}
	return dev.GetPfName(), int(dev.GetVfIndex()), nil
}

// plan returns the settings cfg asks for, in the order Setup applies them,
// and the state they make from cur. Fields cfg leaves unset keep cur's
// value. A rate pair that would end up with min above a non-zero max is a
// *fielderr.Error.
func plan(cur vfState, cfg *devicev1.DeviceConfig) ([]setting, vfState, error) {
	want := cur
	want.MAC = bytes.Clone(cur.MAC)
	if cfg == nil {
		return nil, want, nil
	}
	var steps []setting
	if cfg.Vlan != nil {
		want.Vlan, want.Qos, want.Proto = cfg.GetVlan(), cfg.GetVlanQos(), protoQ
		if cfg.GetVlanProto() == devicev1.VlanProto_VLAN_PROTO_8021AD {
			want.Proto = protoAD
		}
		steps = append(steps, settingVlan)
	}
	if cfg.GetMacAddress() != "" {
		mac, err := parseMAC("config.macAddress", cfg.GetMacAddress())
		if err != nil {
			return nil, vfState{}, err
		}
		want.MAC = mac
		steps = append(steps, settingMAC)
	}
	if cfg.SpoofChk != nil {
		want.SpoofChk = cfg.GetSpoofChk()
		steps = append(steps, settingSpoofChk)
	}
	if cfg.Trust != nil {
		want.Trust = cfg.GetTrust()
		steps = append(steps, settingTrust)
	}
	if ls := cfg.GetLinkState(); ls != devicev1.VfLinkState_VF_LINK_STATE_UNSPECIFIED {
		k, ok := kernelLinkState(ls)
		if !ok {
			return nil, vfState{}, fielderr.New("config.linkState", "%v is not auto, enable or disable", ls)
		}
		want.LinkState = k
		steps = append(steps, settingLinkState)
	}
	if cfg.MinTxRate != nil || cfg.MaxTxRate != nil {
		if cfg.MinTxRate != nil {
			want.MinTxRate = cfg.GetMinTxRate()
		}
		if cfg.MaxTxRate != nil {
			want.MaxTxRate = cfg.GetMaxTxRate()
		}
		if want.MaxTxRate != 0 && want.MinTxRate > want.MaxTxRate {
			return nil, vfState{}, fielderr.New("config.minTxRate", "%d Mbps is more than the max tx rate, %d Mbps", want.MinTxRate, want.MaxTxRate)
		}
		steps = append(steps, settingRate)
	}
	return steps, want, nil
}

// applyVF applies steps of want to VF vf of pf, skipping the ones where cur
// already agrees. On a failure (or when ctx ends between steps) it puts the
// settings it changed back to cur, last first, and returns the error joined
// with any error of that rollback.
func applyVF(ctx context.Context, log *slog.Logger, links pfLinks, pf string, vf int, steps []setting, cur, want vfState) error {
	var done []setting
	var err error
	for _, s := range steps {
		if err = ctx.Err(); err != nil {
			break
		}
		if s.same(cur, want) {
			continue
		}
		if err = links.SetVF(pf, vf, s, want); err != nil {
			err = refusal(s, cur, want, fmt.Errorf("setting %s of VF %d on %s: %w", s.describe(want), vf, pf, err))
			break
		}
		done = append(done, s)
	}
	if err == nil {
		return nil
	}
	var rerrs []error
	for i := len(done) - 1; i >= 0; i-- {
		s := done[i]
		if rerr := links.SetVF(pf, vf, s, cur); rerr != nil {
			rerrs = append(rerrs, fmt.Errorf("restoring %s of VF %d on %s: %w", s.describe(cur), vf, pf, rerr))
		}
	}
	if rerr := errors.Join(rerrs...); rerr != nil {
		log.Error("VF settings left changed after a failed setup", "pf", pf, "vf", vf, "error", err, "restoreError", rerr)
		return errors.Join(err, rerr)
	}
	return err
}

// refusal turns err, the PF's failure to apply setting s (from cur to
// want), into a *fielderr.Error naming the claim's field when the PF's driver
// refused the value (EOPNOTSUPP, EPROTONOSUPPORT, EINVAL, ERANGE: each NIC's
// driver takes a different subset of the VF settings), so that the claim's
// event says which of its settings this node's NIC cannot apply. Other
// errors (the PF gone, a busy kernel) are returned as they are.
func refusal(s setting, cur, want vfState, err error) error {
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EPROTONOSUPPORT) &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ERANGE) {
		return err
	}
	field := map[setting]string{settingVlan: "config.vlan", settingMAC: "config.macAddress",
		settingSpoofChk: "config.spoofChk", settingTrust: "config.trust", settingLinkState: "config.linkState",
		settingRate: "config.maxTxRate"}[s]
	switch {
	case s == settingVlan && normProto(want.Proto) != normProto(cur.Proto) && errors.Is(err, unix.EPROTONOSUPPORT):
		field = "config.vlanProto"
	case s == settingVlan && want.Vlan == cur.Vlan && want.Qos != cur.Qos:
		field = "config.vlanQoS"
	case s == settingRate && want.MinTxRate != cur.MinTxRate &&
		(want.MaxTxRate == cur.MaxTxRate || errors.Is(err, unix.EINVAL) && want.MinTxRate != 0):
		field = "config.minTxRate"
	}
	return fielderr.New(field, "the PF's driver refuses it: %v", err)
}

// restoreVF puts every setting of VF vf of pf where cur differs from orig
// back to orig. It tries them all and joins the errors.
func restoreVF(links pfLinks, pf string, vf int, cur, orig vfState) error {
	var errs []error
	for s := range numSettings {
		if s.same(cur, orig) {
			continue
		}
		if err := links.SetVF(pf, vf, s, orig); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s of VF %d on %s: %w", s.describe(orig), vf, pf, err))
		}
	}
	return errors.Join(errs...)
}

// snapshotOf is st as a VfSnapshot.
func snapshotOf(st vfState) *devicev1.VfSnapshot {
	s := &devicev1.VfSnapshot{
		MacAddress: st.MAC.String(),
		Vlan:       st.Vlan,
		VlanQos:    st.Qos,
		VlanProto:  devicev1.VlanProto_VLAN_PROTO_8021Q,
		SpoofChk:   st.SpoofChk,
		Trust:      st.Trust,
		MinTxRate:  st.MinTxRate,
		MaxTxRate:  st.MaxTxRate,
	}
	if normProto(st.Proto) == protoAD {
		s.VlanProto = devicev1.VlanProto_VLAN_PROTO_8021AD
	}
	switch st.LinkState {
	case linkStateAuto:
		s.LinkState = devicev1.VfLinkState_VF_LINK_STATE_AUTO
	case linkStateEnable:
		s.LinkState = devicev1.VfLinkState_VF_LINK_STATE_ENABLE
	case linkStateDisable:
		s.LinkState = devicev1.VfLinkState_VF_LINK_STATE_DISABLE
	}
	return s
}

// stateOf is the vfState a VfSnapshot records. A snapshot field the kernel
// cannot take (an unparsable MAC, an unspecified link state) takes cur's
// value, so restoring leaves it alone.
func stateOf(s *devicev1.VfSnapshot, cur vfState) vfState {
	st := vfState{
		MAC:       cur.MAC,
		Vlan:      s.GetVlan(),
		Qos:       s.GetVlanQos(),
		Proto:     protoQ,
		SpoofChk:  s.GetSpoofChk(),
		Trust:     s.GetTrust(),
		LinkState: cur.LinkState,
		MinTxRate: s.GetMinTxRate(),
		MaxTxRate: s.GetMaxTxRate(),
	}
	if mac, err := net.ParseMAC(s.GetMacAddress()); err == nil {
		st.MAC = mac
	}
	if s.GetVlanProto() == devicev1.VlanProto_VLAN_PROTO_8021AD {
		st.Proto = protoAD
	}
	if k, ok := kernelLinkState(s.GetLinkState()); ok {
		st.LinkState = k
	}
	return st
}

func kernelLinkState(ls devicev1.VfLinkState) (uint32, bool) {
	switch ls {
	case devicev1.VfLinkState_VF_LINK_STATE_AUTO:
		return linkStateAuto, true
	case devicev1.VfLinkState_VF_LINK_STATE_ENABLE:
		return linkStateEnable, true
	case devicev1.VfLinkState_VF_LINK_STATE_DISABLE:
		return linkStateDisable, true
	}
	return 0, false
}
