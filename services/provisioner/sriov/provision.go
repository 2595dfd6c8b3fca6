package sriov

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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

// checkTotals refuses a vfCount above the sriov_totalvfs of its PF (a
// *fielderr.Error for "ifaces[N].vfCount") for every PF sysfs shows; it only
// reads. A PF it cannot read is left for provisioning to report.
func checkTotals(sysfsRoot string, ifaces []*provisionerv1.SriovInterface) error {
	for i, iface := range ifaces {
		want := iface.GetVfCount()
		if want == 0 {
			continue
		}
		total, err := readUint(filepath.Join(pfDevice(sysfsRoot, iface.GetIfName()), "sriov_totalvfs"))
		if err == nil && uint64(want) > total {
			return fielderr.New(fmt.Sprintf("ifaces[%d].vfCount", i), "%d is more than PF %s can have (its sriov_totalvfs is %d)", want, iface.GetIfName(), total)
		}
	}
	return nil
}

// pfDevice is the PCI device directory of the PF whose netdev is pf.
func pfDevice(sysfsRoot, pf string) string {
	return filepath.Join(sysfsRoot, "class", "net", pf, "device")
}

// Prepared tells the sr-iov manager which VFs are prepared for claims: it
// changes a PF's VF count only when none of the PF's VFs is, since the
// kernel destroys every VF of a PF whose count changes, with the netdevs
// in pods' namespaces. The provisioner's server implements it.
type Prepared interface {
	// HoldPF returns how many of vfs (the device names of the VFs of the
	// PF whose netdev is pf) are prepared for claims, or -1 when that is
	// not known. When it returns 0, no Setup of a VF of pf runs (one under
	// way has ended) until release is called; release is never nil, and
	// is called once, whatever the count.
	HoldPF(pf string, vfs []string) (prepared int, release func())
	// Changed returns a channel closed at the next change that may free
	// VFs (a Free, a new list of the prepared ones): the moment to look
	// again at the PFs whose count waits.
	Changed() <-chan struct{}
}

// ProvisionVFs gives every PF in ifaces its vfCount of VFs, not knowing
// which VFs are prepared for claims: a PF with no VFs gets vfCount written
// to sriov_numvfs; a PF whose sriov_numvfs is another non-zero count is
// left alone, with a warning (logged and returned); a vfCount of 0 leaves
// the PF's VFs as they are (the NodeConfig's "use what is there"). A
// vfCount above sriov_totalvfs is an error (ErrTooManyVFs) naming the PF
// and both numbers, and so is a PF that does not exist (ErrPFNotFound) or
// has no SR-IOV capability (ErrNotSriov); such a PF is left as it was.
// Every PF is tried; the errors are joined. It is idempotent: a second call
// finds the counts the first wrote and does nothing. ifaces must have
// passed ValidateConfig. The sr-iov manager, which knows the prepared VFs
// (WithPrepared), re-creates the VFs of a PF whose count differs when none
// of them is prepared.
func ProvisionVFs(log *slog.Logger, sysfsRoot string, ifaces []*provisionerv1.SriovInterface) (warnings []string, err error) {
	p, err := newProvisioner(log, sysfsRoot, nil, nil).provision(ifaces, false)
	p.release()
	return p.warnings(), err
}

// provisioner gives PFs their configured VF counts.
type provisioner struct {
	log  *slog.Logger
	root string
	// prepared says which VFs are prepared; nil: not known, and a
	// non-zero count is never changed.
	prepared Prepared
	// write writes n to the sriov_numvfs file at path.
	write func(path string, n uint64) error
}

func newProvisioner(log *slog.Logger, sysfsRoot string, prepared Prepared, write func(string, uint64) error) provisioner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if write == nil {
		write = writeNumVFs
	}
	return provisioner{log: log, root: sysfsRoot, prepared: prepared, write: write}
}

// writeNumVFs writes n to the sriov_numvfs file at path: the kernel creates
// n VFs, or destroys them all for 0.
func writeNumVFs(path string, n uint64) error {
	return os.WriteFile(path, []byte(strconv.FormatUint(n, 10)), 0)
}

// provisioned is what one provisioning pass left: the PFs whose count waits,
// and the holds on the PFs whose VFs it re-created.
type provisioned struct {
	waiting []waitingPF
	// held keeps the Setups of the re-created PFs' VFs waiting until the
	// new VFs are published: a Setup must not find the old ones in the
	// inventory.
	held []func()
}

// waitingPF is a PF whose configured count is not applied yet, and why.
type waitingPF struct {
	iface   *provisionerv1.SriovInterface
	warning string
}

// release ends the holds. Idempotent.
func (p *provisioned) release() {
	for _, r := range p.held {
		r()
	}
	p.held = nil
}

// warnings says why each waiting PF waits, in the order of the config.
func (p *provisioned) warnings() []string {
	var out []string
	for _, w := range p.waiting {
		out = append(out, w.warning)
	}
	return out
}

// ifaces are the waiting PFs' entries, to try again.
func (p *provisioned) ifaces() []*provisionerv1.SriovInterface {
	var out []*provisionerv1.SriovInterface
	for _, w := range p.waiting {
		out = append(out, w.iface)
	}
	return out
}

// provision gives each PF of ifaces its count (provisionPF). A PF that
// fails is an error, joined with the others' (keepFailed false), or a
// waiting PF with the error as its warning (keepFailed true: tried again
// at the next pass). The caller releases the result's holds, error or not.
func (p provisioner) provision(ifaces []*provisionerv1.SriovInterface, keepFailed bool) (provisioned, error) {
	var out provisioned
	var errs []error
	for _, iface := range ifaces {
		err := p.provisionPF(iface, &out)
		switch {
		case err == nil:
		case keepFailed:
			p.log.Warn("Provisioning VFs failed; tried again at the next rescan", "pf", iface.GetIfName(), "error", err)
			out.waiting = append(out.waiting, waitingPF{iface: iface, warning: err.Error()})
		default:
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// provisionPF gives one PF its count: written when it has no VFs, its VFs
// re-created (0, then the count) when it has another count and none of
// them is prepared (the hold on it goes to out), else left alone with the
// PF added to out's waiting ones. An error leaves the PF as it was, except
// a failure to write the new count after 0: the PF then has no VFs, and
// the next pass writes the count again.
func (p provisioner) provisionPF(iface *provisionerv1.SriovInterface, out *provisioned) error {
	pf, want := iface.GetIfName(), uint64(iface.GetVfCount())
	dev := pfDevice(p.root, pf)
	if _, err := os.Stat(dev); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("PF %s: no PCI device at %s: %w", pf, dev, ErrPFNotFound)
		}
		return fmt.Errorf("PF %s: %w", pf, err)
	}
	total, err := readUint(filepath.Join(dev, "sriov_totalvfs"))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("PF %s: no sriov_totalvfs: %w", pf, ErrNotSriov)
	}
	if err != nil {
		return fmt.Errorf("PF %s: %w", pf, err)
	}
	if want == 0 {
		p.log.Debug("PF's VFs left as they are (vfCount 0)", "pf", pf)
		return nil
	}
	if want > total {
		return fmt.Errorf("PF %s: vfCount %d is more than sriov_totalvfs %d: %w", pf, want, total, ErrTooManyVFs)
	}
	numvfs := filepath.Join(dev, "sriov_numvfs")
	have, err := readUint(numvfs)
	if err != nil {
		return fmt.Errorf("PF %s: %w", pf, err)
	}
	switch {
	case have == want:
		p.log.Debug("PF has its VFs", "pf", pf, "vfs", have)
		return nil
	case have == 0:
		if err := p.write(numvfs, want); err != nil {
			return fmt.Errorf("PF %s: writing %d to sriov_numvfs: %w", pf, want, err)
		}
		p.log.Info("Created VFs", "pf", pf, "vfs", want)
		return nil
	}
	return p.recount(iface, dev, have, want, out)
}

// recount changes the count of PF iface (PCI device dev) from have VFs to
// want. Without a view of the prepared VFs, or while one of its VFs is
// prepared for a claim, it leaves the PF alone and adds it to out's
// waiting PFs with a warning that says why. Else it writes 0, then want
// (the kernel takes a new non-zero count only from 0) and holds the PF in
// out until the new VFs are published.
func (p provisioner) recount(iface *provisionerv1.SriovInterface, dev string, have, want uint64, out *provisioned) error {
	pf, numvfs := iface.GetIfName(), filepath.Join(dev, "sriov_numvfs")
	if p.prepared == nil {
		out.waiting = append(out.waiting, waitingPF{iface: iface, warning: fmt.Sprintf(
			"PF %s has %d VFs, not the %d configured; left alone: which of them are prepared for claims is not known here (set sriov_numvfs to 0 to let netdra create them)", pf, have, want)})
		p.log.Warn("PF VF count differs from the config; left alone", "pf", pf, "sriovNumvfs", have, "vfCount", want)
		return nil
	}
	vfs, err := vfNames(dev)
	if err != nil {
		return fmt.Errorf("PF %s: %w", pf, err)
	}
	n, release := p.prepared.HoldPF(pf, vfs)
	if n != 0 {
		release()
		why := "dra lists the VFs prepared for claims"
		switch {
		case n == 1:
			why = "its allocated VF is freed"
		case n > 1:
			why = fmt.Sprintf("its %d allocated VFs are freed", n)
		}
		out.waiting = append(out.waiting, waitingPF{iface: iface, warning: fmt.Sprintf(
			"PF %s: vfCount %d waits until %s (it keeps its %d VFs until then)", pf, want, why, have)})
		p.log.Info("PF's VF count waits", "pf", pf, "sriovNumvfs", have, "vfCount", want, "preparedVFs", n)
		return nil
	}
	// The kernel takes a new non-zero count only from 0 (EBUSY otherwise).
	if err := p.write(numvfs, 0); err != nil {
		release()
		return fmt.Errorf("PF %s: writing 0 to sriov_numvfs to re-create its %d VFs as %d: %w", pf, have, want, err)
	}
	if err := p.write(numvfs, want); err != nil {
		release()
		return fmt.Errorf("PF %s: writing %d to sriov_numvfs after 0 (it has no VFs now): %w", pf, want, err)
	}
	out.held = append(out.held, release)
	p.log.Info("Re-created VFs", "pf", pf, "from", have, "vfs", want)
	return nil
}

// vfNames returns the device names of the VFs of the PF device dev (its
// virtfnN links), sorted.
func vfNames(dev string) ([]string, error) {
	links, err := filepath.Glob(filepath.Join(dev, "virtfn*"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		target, err := os.Readlink(l)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed under us
		}
		if err != nil {
			return nil, err
		}
		out = append(out, deviceName(filepath.Base(target)))
	}
	slices.Sort(out)
	return out, nil
}
