package ebpftest

import (
	"net"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

func ifindex(name string) (int, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifc.Index, nil
}

// PassProgram loads a SchedCLS program named name that passes every frame
// (what a host's own program stands for in hand-off tests), closed at the
// end of the test.
func PassProgram(t testing.TB, name string) *ebpf.Program {
	t.Helper()
	return load(t, &ebpf.ProgramSpec{Name: name, Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
}

// XDPPassProgram loads an XDP program named name that passes every frame.
func XDPPassProgram(t testing.TB, name string) *ebpf.Program {
	t.Helper()
	return load(t, &ebpf.ProgramSpec{Name: name, Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
}

func load(t testing.TB, spec *ebpf.ProgramSpec) *ebpf.Program {
	p, err := ebpf.NewProgram(spec)
	if err != nil {
		t.Fatalf("loading program %s: %v", spec.Name, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// ProgramFromID opens the loaded program id, closed at the end of the
// test.
func ProgramFromID(t testing.TB, id uint32) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		t.Fatalf("opening program %d: %v", id, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
