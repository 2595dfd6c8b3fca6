package store

import (
	"fmt"
	"path/filepath"
	"regexp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func validDeviceName(field, name string) error {
	if !dnsLabel.MatchString(name) {
		return fieldErr(field, "%q is not a DNS label (lowercase letters, digits and '-', at most 63)", name)
	}
	return nil
}

func validPool(field, pool string) error {
	if len(pool) > 253 || !dnsSubdomain.MatchString(pool) {
		return fieldErr(field, "%q is not a DNS subdomain (lowercase letters, digits, '-' and '.', no '/')", pool)
	}
	return nil
}

func validUID(field, uid string, required bool) error {
	switch {
	case uid == "" && required:
		return fieldErr(field, "required")
	case len(uid) > 128:
		return fieldErr(field, "longer than 128 characters")
	}
	for _, r := range uid {
		if r <= ' ' || r > '~' {
			return fieldErr(field, "%q holds a character outside printable ASCII", uid)
		}
	}
	return nil
}

func validManager(field string, m devicev1.DeviceManager, required bool) error {
	if m == devicev1.DeviceManager_DEVICE_MANAGER_UNSPECIFIED {
		if required {
			return fieldErr(field, "required")
		}
		return nil
	}
	if _, ok := devicev1.DeviceManager_name[int32(m)]; !ok {
		return fieldErr(field, "unknown device manager %d", m)
	}
	return nil
}

func validKey(field string, k *statev1.AllocationKey) error {
	if k == nil {
		return fieldErr(field, "required")
	}
	if err := validPool(field+".pool", k.GetPool()); err != nil {
		return err
	}
	if err := validDeviceName(field+".deviceName", k.GetDeviceName()); err != nil {
		return err
	}
	return validShareID(field+".shareId", k.GetShareId())
}

// shareID is a share ID as the scheduler makes them (a UUID), or any DNS
// label: lower-case letters, digits and '-'.
var shareID = dnsLabel

// validShareID checks a share ID; empty is a device held whole.
func validShareID(field, id string) error {
	if id != "" && !shareID.MatchString(id) {
		return fieldErr(field, "%q is not a share ID (a UUID: lower-case hex digits and '-', at most 63 characters)", id)
	}
	return nil
}

// validAllocation checks the identity fields every new allocation needs.
func validAllocation(field string, a *statev1.Allocation) error {
	if err := validPool(field+".pool", a.GetPool()); err != nil {
		return err
	}
	if err := validDeviceName(field+".deviceName", a.GetDeviceName()); err != nil {
		return err
	}
	if err := validShareID(field+".shareId", a.GetShareId()); err != nil {
		return err
	}
	if err := validManager(field+".manager", a.GetManager(), true); err != nil {
		return err
	}
	if err := validUID(field+".claimUid", a.GetClaimUid(), true); err != nil {
		return err
	}
	return validUID(field+".podUid", a.GetPodUid(), false)
}

// validPrepared checks a prepared device against the allocation it is for.
func validPrepared(field string, pd *devicev1.PreparedDevice, deviceName string) error {
	if pd == nil {
		return fieldErr(field, "required")
	}
	if n := pd.GetDevice().GetName(); n != deviceName {
		return fieldErr(field+".device.name", "%q does not match the allocation's device %q", n, deviceName)
	}
	return nil
}

func validNetns(field, path string) error {
	if path == "" || !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fieldErr(field, "%q is not a clean absolute path", path)
	}
	return nil
}

func indexed(field string, i int) string { return fmt.Sprintf("%s[%d]", field, i) }
