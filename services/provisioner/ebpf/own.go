package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// owner recognises netdra's own programs on a link, so that the hand-off
// never takes them for a host's and a sweep finds the ones a killed
// provisioner left. A name is not enough (anyone may call a program
// netdra_ingress): a program is netdra's when it bears the name of one of
// netdra's programs and either its kernel tag is that program's in the
// object this build carries, or a link pinned under Programs' root holds it
// (a program of an earlier build, which the tag does not know).
type owner struct {
	specs map[string]*ebpf.ProgramSpec // netdra's programs, by the name the kernel reports
	links string                       // Programs' pin root
}

// newOwner returns an owner for the programs pinned under
// <bpffs>/netdra/<host netns>.
func newOwner(bpffs string) (*owner, error) {
	spec, err := loadNetdra()
	if err != nil {
		return nil, fmt.Errorf("parsing the eBPF object: %w", err)
	}
	id, err := hostNetnsID()
	if err != nil {
		return nil, err
	}
	specs := map[string]*ebpf.ProgramSpec{}
	for _, ps := range spec.Programs {
		specs[kernelName(ps.Name)] = ps
	}
	return &owner{specs: specs, links: filepath.Join(bpffs, "netdra", id)}, nil
}

// kernelName is name as the kernel keeps it (BPF_OBJ_NAME_LEN less the
// NUL).
func kernelName(name string) string {
	if len(name) > 15 {
		return name[:15]
	}
	return name
}

// ours reports whether the program with info is one of netdra's. An
// error means it could not be told (its tag, the pins unreadable): the
// caller must then treat it as not netdra's.
func (o *owner) ours(info *ebpf.ProgramInfo) (bool, error) {
	ps := o.specs[info.Name]
	if ps == nil {
		return false, nil
	}
	err := ps.Compatible(info)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, ebpf.ErrProgIncompatible) {
		return false, fmt.Errorf("comparing the tag of program %s: %w", info.Name, err)
	}
	id, ok := info.ID()
	if !ok {
		return false, nil
	}
	return o.pinned(id)
}

// pinned reports whether a link pinned under the links root (one per
// device directory and direction) holds the program id.
func (o *owner) pinned(id ebpf.ProgramID) (bool, error) {
	ents, err := os.ReadDir(o.links)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("listing %s: %w", o.links, err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		for _, name := range []string{pinIngress, pinEgress} {
			l, err := link.LoadPinnedLink(filepath.Join(o.links, e.Name(), name), nil)
			if err != nil {
				continue // none pinned, or not a link
			}
			info, err := l.Info()
			l.Close()
			if err == nil && info.Program == id {
				return true, nil
			}
		}
	}
	return false, nil
}
