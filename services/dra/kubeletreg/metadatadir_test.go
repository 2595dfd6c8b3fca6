package kubeletreg

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// The helper's metadata directory goes when it is empty, and stays while a
// claim's metadata is in it.
func TestRemoveEmptyMetadataDir(t *testing.T) {
	root := t.TempDir()
	r := New(Config{PluginDir: root, Logger: slog.New(slog.DiscardHandler)})
	dir := filepath.Join(root, "netdra.io", metadataDir)
	claim := filepath.Join(dir, "ns_claim")
	if err := os.MkdirAll(claim, 0o755); err != nil {
		t.Fatal(err)
	}
	r.RemoveEmptyMetadataDir("netdra.io")
	if _, err := os.Stat(claim); err != nil {
		t.Fatalf("a claim's metadata went: %v", err)
	}
	if err := os.Remove(claim); err != nil {
		t.Fatal(err)
	}
	r.RemoveEmptyMetadataDir("netdra.io")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the empty metadata directory stayed: %v", err)
	}
	r.RemoveEmptyMetadataDir("netdra.io") // gone already: nothing to say
}
