package hostdev

import (
	"path"
	"regexp"
	"strconv"
	"strings"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// maxIfNameLen is the longest interface name the kernel allows (IFNAMSIZ-1).
const maxIfNameLen = 15

// hexID is a PCI vendor or device ID as sysfs prints it.
var hexID = regexp.MustCompile(`^0x[0-9a-fA-F]{4}$`)

// selector is a parsed HostConfig: which interfaces the manager offers.
// Each non-empty list must match (they are ANDed); an empty list matches
// anything.
type selector struct {
	names   []string        // exact names or path.Match globs
	drivers map[string]bool // kernel driver names
	vendors map[string]bool // lower-case 0xNNNN
	devices map[string]bool // lower-case 0xNNNN
}

// parseConfig checks cfg and returns its selector, or a *fielderr.Error
// whose field is relative to the config ("ifNames[1]").
func parseConfig(cfg *provisionerv1.HostConfig) (selector, error) {
	var s selector
	if len(cfg.GetIfNames())+len(cfg.GetDrivers())+len(cfg.GetVendorIds())+len(cfg.GetDeviceIds()) == 0 {
		return s, fielderr.New("ifNames", "select interfaces by ifNames, drivers, vendorIds or deviceIds: all are empty, and the host manager never offers every interface")
	}
	for i, p := range cfg.GetIfNames() {
		if err := checkIfName(p); err != "" {
			return s, fielderr.New(indexed("ifNames", i), "%s", err)
		}
		s.names = append(s.names, p)
	}
	var err error
	if s.drivers, err = set("drivers", cfg.GetDrivers(), func(d string) (string, string) {
		if d == "" || strings.ContainsAny(d, "/ \t\n") {
			return "", "not a driver name"
		}
		return d, ""
	}); err != nil {
		return s, err
	}
	id := func(v string) (string, string) {
		if !hexID.MatchString(v) {
			return "", "not a 16-bit hex ID like 0x8086"
		}
		return strings.ToLower(v), ""
	}
	if s.vendors, err = set("vendorIds", cfg.GetVendorIds(), id); err != nil {
		return s, err
	}
	if s.devices, err = set("deviceIds", cfg.GetDeviceIds(), id); err != nil {
		return s, err
	}
	return s, nil
}

// checkIfName says what is wrong with an ifNames entry, or "".
func checkIfName(p string) string {
	switch {
	case p == "":
		return "required: an interface name or a glob (eth*)"
	case strings.Contains(p, "/"):
		return "contains '/', which no interface name does"
	}
	if _, err := path.Match(p, ""); err != nil {
		return "\"" + p + "\" is not a valid glob: " + err.Error()
	}
	if !isGlob(p) && len(p) > maxIfNameLen {
		return "\"" + p + "\" is longer than an interface name can be (15 bytes)"
	}
	return ""
}

func isGlob(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// set parses a list into a set with norm, which returns the normalized
// value, or why the value is bad. A nil set means the list was empty.
func set(field string, list []string, norm func(string) (v, bad string)) (map[string]bool, error) {
	if len(list) == 0 {
		return nil, nil
	}
	m := make(map[string]bool, len(list))
	for i, v := range list {
		n, bad := norm(v)
		if bad != "" {
			return nil, fielderr.New(indexed(field, i), "%q is %s", v, bad)
		}
		m[n] = true
	}
	return m, nil
}

func indexed(field string, i int) string {
	return field + "[" + strconv.Itoa(i) + "]"
}

// matchName reports whether the interface name passes ifNames.
func (s selector) matchName(name string) bool {
	if len(s.names) == 0 {
		return true
	}
	for _, p := range s.names {
		if p == name {
			return true
		}
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// matchDevice reports whether a described interface passes drivers,
// vendorIds and deviceIds.
func (s selector) matchDevice(d *devicev1.Device) bool {
	return in(s.drivers, d.GetDriver()) && in(s.vendors, d.GetVendorId()) && in(s.devices, d.GetDeviceId())
}

// in reports whether v is in set; every value is in a nil set.
func in(set map[string]bool, v string) bool {
	return set == nil || set[v]
}
