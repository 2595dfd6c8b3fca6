package v1alpha1

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/ippool"
)

var (
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	hexID        = regexp.MustCompile(`^0x[0-9a-fA-F]{4}$`)
	pciAddr      = regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)
	resourceName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// Validate checks spec as the CRD's OpenAPI schema and CEL rules do, plus
// what they cannot say (valid globs, the reserved interface names "." and
// ".."). It returns nil, or a *fielderr.Error naming the first bad field
// relative to the spec ("pools[1].name", "pools[0].filter.ifNames[2]",
// "deviceManagerConfigs.dummy.count"). Unset optional fields are valid: they
// take their defaults. A nil spec is valid.
func Validate(spec *NodeConfigSpec) error {
	if spec == nil {
		return nil
	}
	if spec.DriverName != "" {
		if err := checkDNSSubdomain(spec.DriverName, MaxDriverNameLen); err != "" {
			return fielderr.New("driverName", "%s", err)
		}
	}
	for _, f := range []struct {
		field string
		v     *int32
		max   int32
	}{
		{"draRegistrationRetryInterval", spec.DRARegistrationRetryInterval, MaxRegistrationSeconds},
		{"draRegistrationTimeout", spec.DRARegistrationTimeout, MaxRegistrationSeconds},
		{"draRegistrationMaxAttempts", spec.DRARegistrationMaxAttempts, MaxRegistrationAttempts},
	} {
		if f.v != nil && (*f.v < 1 || *f.v > f.max) {
			return fielderr.New(f.field, "%d is out of range 1..%d", *f.v, f.max)
		}
	}
	if err := validatePools(spec.Pools); err != nil {
		return err
	}
	if _, err := ippool.ParseAll("ipPools", IPPoolSpecs(spec.IPPools)); err != nil {
		return err
	}
	if err := fielderr.Prefix("deviceManagerConfigs", validateManagers(spec.DeviceManagerConfigs)); err != nil {
		return err
	}
	if spec.SysfsRoot != "" {
		if err := checkPath(spec.SysfsRoot); err != "" {
			return fielderr.New("sysfsRoot", "%s", err)
		}
	}
	return nil
}

func validatePools(pools []Pool) error {
	if len(pools) > MaxPools {
		return fielderr.New("pools", "%d pools, more than %d", len(pools), MaxPools)
	}
	names := map[string]int{}
	ifNames := map[string]int{} // ifNames value -> pool index
	for i, p := range pools {
		field := fmt.Sprintf("pools[%d]", i)
		if err := checkPoolName(p.Name); err != "" {
			return fielderr.New(field+".name", "%s", err)
		}
		if j, dup := names[p.Name]; dup {
			return fielderr.New(field+".name", "%q is already the name of pools[%d]: pool names are unique", p.Name, j)
		}
		names[p.Name] = i
		switch p.UnhealthyTaintEffect {
		case "", TaintEffectNoSchedule, TaintEffectNoExecute, TaintEffectNone:
		default:
			return fielderr.New(field+".unhealthyTaintEffect", "%q is not NoSchedule, NoExecute or None", p.UnhealthyTaintEffect)
		}
		if p.MultusResourceName != "" {
			if err := checkMultusResourceName(p.MultusResourceName); err != "" {
				return fielderr.New(field+".multusResourceName", "%s", err)
			}
		}
		if err := validatePoolIPPools(field+".ipPools", p.IPPools); err != nil {
			return err
		}
		if p.Filter == nil {
			continue
		}
		if err := fielderr.Prefix(field+".filter", validateFilter(p.Filter)); err != nil {
			return err
		}
		for k, n := range p.Filter.IfNames {
			if j, dup := ifNames[n]; dup {
				return fielderr.New(fmt.Sprintf("%s.filter.ifNames[%d]", field, k),
					"%q is already in pool %q (pools[%d]): an ifNames value names one device and may appear in one pool only", n, pools[j].Name, j)
			}
			ifNames[n] = i
		}
	}
	return nil
}

// validatePoolIPPools checks a pool's ipPools: at most ippool.MaxPools
// names, each an address pool's name, none twice.
func validatePoolIPPools(field string, names []string) error {
	if len(names) > ippool.MaxPools {
		return fielderr.New(field, "%d names, more than %d", len(names), ippool.MaxPools)
	}
	seen := map[string]bool{}
	for i, n := range names {
		if !ippool.NameRE.MatchString(n) {
			return fielderr.New(fmt.Sprintf("%s[%d]", field, i), "%q is not a pool name: lower-case letters, digits, '-' and '.', at most 63, starting and ending with a letter or digit", n)
		}
		if seen[n] {
			return fielderr.New(fmt.Sprintf("%s[%d]", field, i), "%q is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

func checkPoolName(name string) string {
	if strings.Contains(name, "/") {
		return fmt.Sprintf("%q contains '/', which a pool name may not", name)
	}
	return checkDNSSubdomain(name, MaxPoolNameLen)
}

// checkMultusResourceName: a qualified name as the CRD's pattern says, an
// optional DNS-subdomain prefix and '/', then a name, MaxMultusResourceNameLen
// characters at most (the longest string attribute a slice takes).
func checkMultusResourceName(s string) string {
	if len(s) > MaxMultusResourceNameLen {
		return fmt.Sprintf("%q is %d characters, more than %d", s, len(s), MaxMultusResourceNameLen)
	}
	prefix, name, found := strings.Cut(s, "/")
	if !found {
		prefix, name = "", s
	} else if !dnsSubdomain.MatchString(prefix) {
		return fmt.Sprintf("%q: the prefix %q before '/' is not a DNS subdomain", s, prefix)
	}
	if !resourceName.MatchString(name) {
		return fmt.Sprintf("%q: %q is not a name of letters, digits, '-', '_' and '.', starting and ending with a letter or digit", s, name)
	}
	return ""
}

func validateFilter(f *PoolFilter) error {
	if err := checkList("deviceManagers", f.DeviceManagers, len(DeviceManagers), func(m DeviceManager) string {
		if !slices.Contains(DeviceManagers, m) {
			return fmt.Sprintf("%q is not a device manager: want one of %q", m, DeviceManagers)
		}
		return ""
	}); err != nil {
		return err
	}
	for _, l := range []struct {
		field string
		list  []string
		max   int
		check func(string) string
	}{
		{"pfNames", f.PFNames, 64, checkKernelIfName},
		{"pciAddrs", f.PCIAddrs, 256, checkPCIAddr},
		{"vendorIDs", f.VendorIDs, 32, checkHexID},
		{"deviceIDs", f.DeviceIDs, 32, checkHexID},
		{"drivers", f.Drivers, 32, checkDriver},
		{"ifNames", f.IfNames, MaxPoolFilterIfNames, checkDeviceName},
		{"parentIfNames", f.ParentIfNames, 64, checkKernelIfName},
	} {
		if err := checkList(l.field, l.list, l.max, l.check); err != nil {
			return err
		}
	}
	return nil
}

func validateManagers(m *DeviceManagerConfigs) error {
	if m == nil {
		return nil
	}
	if err := fielderr.Prefix("sriov", validateSRIOV(m.SRIOV)); err != nil {
		return err
	}
	if d := m.Dummy; d != nil && (d.Count < 0 || d.Count > MaxDummyCount) {
		return fielderr.New("dummy.count", "%d is out of range 0..%d", d.Count, MaxDummyCount)
	}
	if err := fielderr.Prefix("host", validateHost(m.Host)); err != nil {
		return err
	}
	return fielderr.Prefix("subif", validateSubif(m.Subif))
}

func validateSRIOV(c *SRIOVConfig) error {
	if c == nil {
		return nil
	}
	if c.SysBusPCIDevPath != "" {
		if err := checkPath(c.SysBusPCIDevPath); err != "" {
			return fielderr.New("sysBusPCIDevPath", "%s", err)
		}
	}
	if len(c.Ifaces) > 64 {
		return fielderr.New("ifaces", "%d entries, more than 64", len(c.Ifaces))
	}
	seen := map[string]int{}
	for i, iface := range c.Ifaces {
		field := fmt.Sprintf("ifaces[%d]", i)
		if err := checkKernelIfName(iface.IfName); err != "" {
			return fielderr.New(field+".ifName", "%s", err)
		}
		if j, dup := seen[iface.IfName]; dup {
			return fielderr.New(field+".ifName", "%q is already ifaces[%d]", iface.IfName, j)
		}
		seen[iface.IfName] = i
		if iface.VFCount < 0 || iface.VFCount > MaxVFCount {
			return fielderr.New(field+".vfCount", "%d is out of range 0..%d", iface.VFCount, MaxVFCount)
		}
	}
	return nil
}

func validateHost(c *HostConfig) error {
	if c == nil {
		return nil
	}
	if c.Enabled && len(c.IfNames)+len(c.Drivers)+len(c.VendorIDs)+len(c.DeviceIDs) == 0 {
		return fielderr.New("enabled", "an enabled host manager needs ifNames, drivers, vendorIDs or deviceIDs: it never offers every interface")
	}
	for _, l := range []struct {
		field string
		list  []string
		max   int
		check func(string) string
	}{
		{"ifNames", c.IfNames, 64, checkIfNameGlob},
		{"drivers", c.Drivers, 32, checkDriver},
		{"vendorIDs", c.VendorIDs, 32, checkHexID},
		{"deviceIDs", c.DeviceIDs, 32, checkHexID},
	} {
		if err := checkList(l.field, l.list, l.max, l.check); err != nil {
			return err
		}
	}
	return nil
}

// checkList checks a list that the CRD declares a set of at most max
// values, each passing check.
func checkList[T comparable](field string, list []T, max int, check func(T) string) error {
	if len(list) > max {
		return fielderr.New(field, "%d values, more than %d", len(list), max)
	}
	seen := map[T]int{}
	for i, v := range list {
		item := fmt.Sprintf("%s[%d]", field, i)
		if err := check(v); err != "" {
			return fielderr.New(item, "%s", err)
		}
		if j, dup := seen[v]; dup {
			return fielderr.New(item, "%q is already %s[%d]", fmt.Sprint(v), field, j)
		}
		seen[v] = i
	}
	return nil
}

// The check functions say what is wrong with a value, or "".

func checkDNSSubdomain(s string, max int) string {
	switch {
	case s == "":
		return "required"
	case len(s) > max:
		return fmt.Sprintf("%q is longer than %d characters", s, max)
	case !dnsSubdomain.MatchString(s):
		return fmt.Sprintf("%q is not a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit", s)
	}
	return ""
}

// checkKernelIfName accepts what the kernel's dev_valid_name accepts.
func checkKernelIfName(s string) string {
	if err := checkName(s, MaxKernelIfNameLen, "/:"); err != "" {
		return err
	}
	if s == "." || s == ".." {
		return fmt.Sprintf("%q is not an interface name", s)
	}
	return ""
}

func checkDeviceName(s string) string { return checkName(s, MaxDeviceNameLen, "/") }
func checkDriver(s string) string     { return checkName(s, 64, "/") }

func checkIfNameGlob(s string) string {
	if err := checkName(s, 64, "/"); err != "" {
		return err
	}
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Sprintf("%q is not a valid glob: %v", s, err)
	}
	if !strings.ContainsAny(s, `*?[\`) && len(s) > MaxKernelIfNameLen {
		return fmt.Sprintf("%q is no glob and longer than an interface name can be (%d bytes)", s, MaxKernelIfNameLen)
	}
	return ""
}

// checkName accepts 1..max bytes without whitespace, control characters or
// any of forbidden.
func checkName(s string, max int, forbidden string) string {
	switch {
	case s == "":
		return "required"
	case len(s) > max:
		return fmt.Sprintf("%q is longer than %d bytes", s, max)
	case strings.ContainsAny(s, forbidden):
		return fmt.Sprintf("%q contains one of %q", s, forbidden)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return fmt.Sprintf("%q contains whitespace or a control character", s)
		}
	}
	return ""
}

func checkHexID(s string) string {
	if !hexID.MatchString(s) {
		return fmt.Sprintf("%q is not a 16-bit hex ID like 0x8086", s)
	}
	return ""
}

func checkPCIAddr(s string) string {
	if !pciAddr.MatchString(s) {
		return fmt.Sprintf("%q is not a PCI address like 0000:03:00.1", s)
	}
	return ""
}

func checkPath(s string) string {
	switch {
	case len(s) > MaxPathLen:
		return fmt.Sprintf("%q is longer than %d bytes", s, MaxPathLen)
	case !strings.HasPrefix(s, "/"):
		return fmt.Sprintf("%q is not an absolute path", s)
	case filepath.Clean(s) != s:
		return fmt.Sprintf("%q is not a clean path; write %s", s, filepath.Clean(s))
	}
	return ""
}
