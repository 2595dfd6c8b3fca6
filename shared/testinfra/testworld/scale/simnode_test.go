package scale

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDirEvents: more folders than a user has inotify instances by
// default (fs.inotify.max_user_instances) are each watched, and an event
// of one folder reaches its watcher only.
func TestDirEvents(t *testing.T) {
	root := t.TempDir()
	const n = 300
	chans := make([]<-chan struct{}, n)
	for i := range n {
		dir := filepath.Join(root, "n", string(rune('a'+i%26))+string(rune('a'+i/26)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		ch, unwatch := dirEvents(dir)
		t.Cleanup(unwatch)
		if ch == nil {
			t.Fatalf("folder %d of %d: not watched", i, n)
		}
		chans[i] = ch
	}
	dir := filepath.Join(root, "n", string(rune('a'+250%26))+string(rune('a'+250/26)))
	if err := os.WriteFile(filepath.Join(dir, "x-reg.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-chans[250]:
	case <-time.After(10 * time.Second):
		t.Fatal("no event for the folder written")
	}
	for i, ch := range chans {
		select {
		case <-ch:
			if i != 250 {
				t.Fatalf("folder %d got an event of folder 250", i)
			}
		default:
		}
	}
}
