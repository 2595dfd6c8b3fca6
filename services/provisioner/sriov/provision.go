package sriov

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// maxIfNameLen is IFNAMSIZ - 1.
const maxIfNameLen = 15

// maxPathLen is the longest path the kernel opens (PATH_MAX less the NUL).
const maxPathLen = 4095

// maxVFCount is the most VFs a PF is asked for, as the NodeConfig CRD
// allows.
const maxVFCount = 4096

// ValidateConfig checks cfg without touching anything: every interface has
// a valid, unique ifName and a vfCount of at most 4096 (0 means: use the
// VFs it has); the path, if set, is clean and absolute. It returns a
// *fielderr.Error with the field relative to cfg ("ifaces[0].vfCount"). A nil
// cfg or one with no ifaces is valid (every VF on the node is published).
func ValidateConfig(cfg *provisionerv1.SriovConfig) error {
	switch p := cfg.GetSysBusPciDevPath(); {
	case p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p):
		return fielderr.New("sysBusPciDevPath", "%q is not a clean absolute path", p)
	case len(p) > maxPathLen:
		return fielderr.New("sysBusPciDevPath", "%d bytes, longer than a path can be (%d)", len(p), maxPathLen)
	}
	seen := map[string]int{}
	for i, iface := range cfg.GetIfaces() {
		field := fmt.Sprintf("ifaces[%d]", i)
		if err := validateIfName(field+".ifName", iface.GetIfName()); err != nil {
			return err
		}
		if j, dup := seen[iface.GetIfName()]; dup {
			return fielderr.New(field+".ifName", "%q is already ifaces[%d]", iface.GetIfName(), j)
		}
		seen[iface.GetIfName()] = i
		if n := iface.GetVfCount(); n > maxVFCount {
			return fielderr.New(field+".vfCount", "%d is out of range 0..%d", n, maxVFCount)
		}
	}
	return nil
}

// validateIfName accepts what the kernel's dev_valid_name accepts.
func validateIfName(field, name string) error {
	switch {
	case name == "":
		return fielderr.New(field, "required")
	case len(name) > maxIfNameLen:
		return fielderr.New(field, "%q is longer than %d bytes", name, maxIfNameLen)
	case name == "." || name == "..":
		return fielderr.New(field, "%q is reserved", name)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '/' || c == ':':
			return fielderr.New(field, "%q contains %q", name, c)
		case c <= ' ' || c == 0x7f:
			return fielderr.New(field, "%q contains whitespace or a control character", name)
		}
	}
	return nil
}

// ProvisionVFs makes sure every PF in ifaces has VFs, as the reference
// design does at startup: a PF whose sriov_numvfs is non-zero is left alone,
// with a warning (logged and returned) when its count differs from
// vfCount; a PF with no VFs gets vfCount written to sriov_numvfs; a vfCount
// of 0 leaves the PF's VFs as they are (the NodeConfig's "use what is
// there"). A vfCount
// above sriov_totalvfs is an error (ErrTooManyVFs) naming the PF and both
// numbers, and so is a PF that does not exist (ErrPFNotFound) or has no
// SR-IOV capability (ErrNotSriov). Every PF is tried; the errors are
// joined. It is idempotent: a second call finds the counts the first wrote
// and does nothing. ifaces must have passed ValidateConfig.
func ProvisionVFs(log *slog.Logger, sysfsRoot string, ifaces []*provisionerv1.SriovInterface) (warnings []string, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	for _, iface := range ifaces {
		warn, err := provisionPF(log, sysfsRoot, iface.GetIfName(), iface.GetVfCount())
		if err != nil {
			errs = append(errs, err)
		}
		if warn != "" {
			warnings = append(warnings, warn)
		}
	}
	return warnings, errors.Join(errs...)
}

// provisionPF provisions one PF; it returns a warning or an error.
func provisionPF(log *slog.Logger, sysfsRoot, pf string, want uint32) (string, error) {
	dev := filepath.Join(sysfsRoot, "class", "net", pf, "device")
	if _, err := os.Stat(dev); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("PF %s: no PCI device at %s: %w", pf, dev, ErrPFNotFound)
		}
		return "", fmt.Errorf("PF %s: %w", pf, err)
	}
	total, err := readUint(filepath.Join(dev, "sriov_totalvfs"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("PF %s: no sriov_totalvfs: %w", pf, ErrNotSriov)
	}
	if err != nil {
		return "", fmt.Errorf("PF %s: %w", pf, err)
	}
	if want == 0 {
		log.Debug("PF's VFs left as they are (vfCount 0)", "pf", pf)
		return "", nil
	}
	if uint64(want) > total {
		return "", fmt.Errorf("PF %s: vfCount %d is more than sriov_totalvfs %d: %w", pf, want, total, ErrTooManyVFs)
	}
	numvfs := filepath.Join(dev, "sriov_numvfs")
	have, err := readUint(numvfs)
	if err != nil {
		return "", fmt.Errorf("PF %s: %w", pf, err)
	}
	switch {
	case have == uint64(want):
		log.Debug("PF has its VFs", "pf", pf, "vfs", have)
		return "", nil
	case have != 0:
		warn := fmt.Sprintf("PF %s has %d VFs, not the %d configured; left alone (set sriov_numvfs to 0 to let netdra create them)", pf, have, want)
		log.Warn("PF VF count differs from the config; left alone", "pf", pf, "sriovNumvfs", have, "vfCount", want)
		return warn, nil
	}
	if err := os.WriteFile(numvfs, []byte(strconv.FormatUint(uint64(want), 10)), 0); err != nil {
		return "", fmt.Errorf("PF %s: writing %d to sriov_numvfs: %w", pf, want, err)
	}
	log.Info("Created VFs", "pf", pf, "vfs", want)
	return "", nil
}
