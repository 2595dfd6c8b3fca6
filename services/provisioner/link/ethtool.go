package link

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/mdlayher/ethtool"
	"github.com/mdlayher/genetlink"
	mnl "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// ethtoolConn talks to the kernel's ethtool netlink family in one network
// namespace: private flags through github.com/mdlayher/ethtool, features
// (which that library does not have) through the same family with
// github.com/mdlayher/genetlink. No ioctl.
type ethtoolConn struct {
	flags  *ethtool.Client
	gen    *genetlink.Conn
	family uint16
	where  string
}

// ethtool opens both sockets inside c's namespace: a socket stays in the
// namespace it was made in.
func (c *conn) ethtool() (*ethtoolConn, error) {
	e := &ethtoolConn{where: c.name}
	err := inNetns(c.ns, func() error {
		var err error
		if e.flags, err = ethtool.New(); err != nil {
			return err
		}
		if e.gen, err = genetlink.Dial(&mnl.Config{Strict: true}); err != nil {
			return err
		}
		f, err := e.gen.GetFamily(unix.ETHTOOL_GENL_NAME)
		e.family = f.ID
		return err
	})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("ethtool netlink in %s: %w", c.name, err)
	}
	return e, nil
}

// Close closes both sockets.
func (e *ethtoolConn) Close() {
	if e.flags != nil {
		e.flags.Close()
	}
	if e.gen != nil {
		e.gen.Close()
	}
}

// read returns the link's wanted state of the features want names and its
// private flags that want names.
func (e *ethtoolConn) read(index int, want *devicev1.LinkSettings) (features, flags map[string]bool, err error) {
	if len(want.GetFeatures()) > 0 {
		f, err := e.features(index)
		if err != nil {
			return nil, nil, err
		}
		features = map[string]bool{}
		for name := range want.GetFeatures() {
			features[name] = f.wanted[name]
		}
	}
	if len(want.GetPrivateFlags()) > 0 {
		all, err := e.privateFlags(index)
		if err != nil {
			return nil, nil, err
		}
		flags = map[string]bool{}
		for name := range want.GetPrivateFlags() {
			v, ok := all[name]
			if !ok {
				return nil, nil, fielderr.New("privateFlags", "%q: the device's driver has no such private flag (it has %v)", name, slices.Sorted(maps.Keys(all)))
			}
			flags[name] = v
		}
	}
	return features, flags, nil
}

// featureSets are a link's features by name: those it can change (hw),
// those wanted and those active.
type featureSets struct{ hw, wanted, active map[string]bool }

func (e *ethtoolConn) features(index int) (featureSets, error) {
	msgs, err := e.execute(unix.ETHTOOL_MSG_FEATURES_GET, 0, index, nil)
	if err != nil {
		return featureSets{}, fmt.Errorf("reading the ethtool features of link %d in %s: %w", index, e.where, err)
	}
	fs := featureSets{hw: map[string]bool{}, wanted: map[string]bool{}, active: map[string]bool{}}
	for _, m := range msgs {
		ad, err := mnl.NewAttributeDecoder(m.Data)
		if err != nil {
			return featureSets{}, err
		}
		for ad.Next() {
			switch ad.Type() {
			case unix.ETHTOOL_A_FEATURES_HW:
				ad.Nested(bitsetNames(fs.hw))
			case unix.ETHTOOL_A_FEATURES_WANTED:
				ad.Nested(bitsetNames(fs.wanted))
			case unix.ETHTOOL_A_FEATURES_ACTIVE:
				ad.Nested(bitsetNames(fs.active))
			}
		}
		if err := ad.Err(); err != nil {
			return featureSets{}, err
		}
	}
	return fs, nil
}

// bitsetNames reads a verbose bitset in list form (ETHTOOL_A_BITSET_NOMASK:
// the bits listed are the ones set) into set.
func bitsetNames(set map[string]bool) func(*mnl.AttributeDecoder) error {
	return func(ad *mnl.AttributeDecoder) error {
		for ad.Next() {
			if ad.Type() != unix.ETHTOOL_A_BITSET_BITS {
				continue
			}
			ad.Nested(func(bits *mnl.AttributeDecoder) error {
				for bits.Next() {
					bits.Nested(func(bit *mnl.AttributeDecoder) error {
						for bit.Next() {
							if bit.Type() == unix.ETHTOOL_A_BITSET_BIT_NAME {
								set[bit.String()] = true
							}
						}
						return bit.Err()
					})
				}
				return bits.Err()
			})
		}
		return ad.Err()
	}
}

// setFeatures turns the features want names on or off. A feature the
// device cannot change (not in its hw set: fixed, or unknown) is refused
// naming it, before any is changed; one the kernel did not turn as asked
// (a dependency on another feature) is refused after, the caller
// restoring the originals.
func (e *ethtoolConn) setFeatures(index int, want map[string]bool) error {
	if len(want) == 0 {
		return nil
	}
	fs, err := e.features(index)
	if err != nil {
		return err
	}
	var change []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if fs.active[name] == want[name] && fs.wanted[name] == want[name] {
			continue
		}
		if !fs.hw[name] {
			return fielderr.New("features", "%q: the device cannot change it (fixed %s, or not a feature the kernel knows)", name, onOff(fs.active[name]))
		}
		change = append(change, name)
	}
	if len(change) == 0 {
		return nil
	}
	_, err = e.execute(unix.ETHTOOL_MSG_FEATURES_SET, mnl.Acknowledge, index, func(ae *mnl.AttributeEncoder) {
		ae.Nested(unix.ETHTOOL_A_FEATURES_WANTED, func(set *mnl.AttributeEncoder) error {
			set.Nested(unix.ETHTOOL_A_BITSET_BITS, func(bits *mnl.AttributeEncoder) error {
				for _, name := range change {
					bits.Nested(unix.ETHTOOL_A_BITSET_BITS_BIT, func(bit *mnl.AttributeEncoder) error {
						bit.String(unix.ETHTOOL_A_BITSET_BIT_NAME, name)
						bit.Flag(unix.ETHTOOL_A_BITSET_BIT_VALUE, want[name])
						return nil
					})
				}
				return nil
			})
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("setting the ethtool features %v of link %d in %s: %w", change, index, e.where, err)
	}
	after, err := e.features(index)
	if err != nil {
		return err
	}
	for _, name := range change {
		if after.active[name] != want[name] {
			return fielderr.New("features", "%q: the kernel left it %s (it depends on another feature)", name, onOff(after.active[name]))
		}
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// execute sends an ethtool command for the link index and returns the
// kernel's answer. A set asks for no reply but the acknowledgement
// (ETHTOOL_FLAG_OMIT_REPLY): a reply left unread would answer the next
// request.
func (e *ethtoolConn) execute(cmd uint8, flags mnl.HeaderFlags, index int, params func(*mnl.AttributeEncoder)) ([]genetlink.Message, error) {
	ae := mnl.NewAttributeEncoder()
	ae.Nested(unix.ETHTOOL_A_FEATURES_HEADER, func(h *mnl.AttributeEncoder) error {
		h.Uint32(unix.ETHTOOL_A_HEADER_DEV_INDEX, uint32(index))
		if cmd == unix.ETHTOOL_MSG_FEATURES_SET {
			h.Uint32(unix.ETHTOOL_A_HEADER_FLAGS, unix.ETHTOOL_FLAG_OMIT_REPLY)
		}
		return nil
	})
	if params != nil {
		params(ae)
	}
	b, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return e.gen.Execute(genetlink.Message{Header: genetlink.Header{Command: cmd, Version: unix.ETHTOOL_GENL_VERSION}, Data: b},
		e.family, mnl.Request|flags)
}

// privateFlags reads the link's private flags; a driver with none has an
// empty map.
func (e *ethtoolConn) privateFlags(index int) (map[string]bool, error) {
	pf, err := e.flags.PrivateFlags(ethtool.Interface{Index: index})
	if errors.Is(err, unix.EOPNOTSUPP) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the private flags of link %d in %s: %w", index, e.where, err)
	}
	return pf.Flags, nil
}

// setPrivateFlags sets the private flags want names; a flag the driver
// does not have, or one it refuses, is an error naming it.
func (e *ethtoolConn) setPrivateFlags(index int, want map[string]bool) error {
	if len(want) == 0 {
		return nil
	}
	have, err := e.privateFlags(index)
	if err != nil {
		return err
	}
	change := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		v, ok := have[name]
		if !ok {
			return fielderr.New("privateFlags", "%q: the device's driver has no such private flag (it has %v)", name, slices.Sorted(maps.Keys(have)))
		}
		if v != want[name] {
			change[name] = want[name]
		}
	}
	if len(change) == 0 {
		return nil
	}
	if err := e.flags.SetPrivateFlags(ethtool.PrivateFlags{Interface: ethtool.Interface{Index: index}, Flags: change}); err != nil {
		return fielderr.New("privateFlags", "the driver refused %v: %v", change, err)
	}
	return nil
}
