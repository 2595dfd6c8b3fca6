package nodetest

import (
	"debug/buildinfo"
	"debug/elf"
	"path/filepath"
	"testing"
)

// TestMain removes the binaries' folder TestBinaries_AsShipped builds.
func TestMain(m *testing.M) { Main(m) }

// TestBinaries_AsShipped: the binaries tests start are built as the images'
// are: static (no ELF interpreter, CGO_ENABLED=0) and with BuildTags.
func TestBinaries_AsShipped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the node processes (-short)")
	}
	bin := filepath.Join(Binaries(t), "state")
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-tags"] != BuildTags || settings["CGO_ENABLED"] != "0" {
		t.Errorf("state built with -tags %q and CGO_ENABLED=%q, want %q and 0", settings["-tags"], settings["CGO_ENABLED"], BuildTags)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("state has an ELF interpreter: not static")
		}
	}
}

// TestOneFormat_CutLine: a line a kill cut short is not judged, and the
// next start's first line is judged on its own; any other line that is not
// JSON is reported.
func TestOneFormat_CutLine(t *testing.T) {
	w := &lockedWriter{}
	_, _ = w.Write([]byte("{\"msg\":\"a\"}\n{\"msg\":\"cut sh"))
	w.endCutLine()
	w.endCutLine() // a second kill with nothing written: nothing more cut
	_, _ = w.Write([]byte("{\"msg\":\"restarted\"}\n"))
	if line, ok := oneFormat(w.String(), w.cutLines()); !ok {
		t.Errorf("oneFormat refused %q of a log whose only bad line a kill cut", line)
	}
	_, _ = w.Write([]byte("I1205 a klog line\n"))
	if line, ok := oneFormat(w.String(), w.cutLines()); ok || line != "I1205 a klog line" {
		t.Errorf("oneFormat = %q, %v; want the klog line refused", line, ok)
	}
}
