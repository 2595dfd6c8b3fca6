package sriov

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// iffUp is IFF_UP in a netdev's sysfs flags.
const iffUp = 0x1

// readLinkState reads a VF netdev's health from its net class directory
// dir: administratively down (flags without IFF_UP), up with no carrier
// (operstate down, lowerlayerdown or notpresent), or up. Missing files
// (a netdev that went away, or in another network namespace) leave it
// unspecified.
func readLinkState(dir string) (devicev1.LinkState, error) {
	flags, err := readString(filepath.Join(dir, "flags"))
	if errors.Is(err, fs.ErrNotExist) {
		return devicev1.LinkState_LINK_STATE_UNSPECIFIED, nil
	}
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseUint(flags, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("%s/flags: %w", dir, err)
	}
	if f&iffUp == 0 {
		return devicev1.LinkState_LINK_STATE_ADMIN_DOWN, nil
	}
	oper, err := readString(filepath.Join(dir, "operstate"))
	if errors.Is(err, fs.ErrNotExist) {
		return devicev1.LinkState_LINK_STATE_UNSPECIFIED, nil
	}
	if err != nil {
		return 0, err
	}
	switch oper {
	case "down", "lowerlayerdown", "notpresent":
		return devicev1.LinkState_LINK_STATE_DOWN, nil
	}
	return devicev1.LinkState_LINK_STATE_UP, nil
}
