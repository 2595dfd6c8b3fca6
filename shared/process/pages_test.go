package process

import (
	"testing"
)

// TestGiveBackStartupPages: the test binary's own read-only pages, which
// its start touched, leave its resident file memory (this test runs as
// the binary's owner, as a netdra image's user owns its binary).
func TestGiveBackStartupPages(t *testing.T) {
	before, err := rssFile()
	if err != nil || before <= 0 {
		t.Fatalf("RssFile: %d, %v", before, err)
	}
	released, err := giveBackStartupPages()
	if err != nil {
		t.Fatal(err)
	}
	if released <= 0 {
		t.Errorf("released %d bytes of %d resident: want some", released, before)
	}
	t.Logf("released %d of %d bytes of resident file memory", released, before)
}
