package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

func goodRow(device string) *statev1.Allocation {
	return &statev1.Allocation{
		Pool: "pool-a", DeviceName: device, Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY,
		ClaimUid: "uid-1", ClaimNamespace: "default", ClaimName: "c1", PodUid: "uid-pod", Phase: prepared,
		PreparedDevice: &devicev1.PreparedDevice{Device: &devicev1.Device{Name: device, Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY}},
	}
}

// stateFile writes a state file netdra would write, holding rows, and
// returns its path.
func stateFile(t *testing.T, rows ...*statev1.Allocation) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	f, err := openFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.apply(rows, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// put writes value under key in the allocations bucket, as a bug or a
// hand edit would, bypassing every check.
func put(t *testing.T, path, key string, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(allocBucket).Put([]byte(key), value) }); err != nil {
		t.Fatal(err)
	}
}

func marshalRow(t *testing.T, a *statev1.Allocation) []byte {
	t.Helper()
	b, err := proto.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOpen_CorruptFile: a state file that is not what netdra wrote (cut
// short, garbage, a valid bbolt file with a bad record) is refused with
// ErrCorrupt, an error naming the file, what is wrong and how to recover;
// nothing is loaded and the file is left as it was.
func TestOpen_CorruptFile(t *testing.T) {
	withRow := func(f func(a *statev1.Allocation)) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			a := goodRow("dummy1")
			f(a)
			put(t, path, KeyOf(a).String(), marshalRow(t, a))
		}
	}
	tests := []struct {
		name    string
		corrupt func(t *testing.T, path string)
		want    string
	}{
		{"cut short", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"cut inside the first page", func(t *testing.T, path string) {
			if err := os.Truncate(path, 100); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"garbage", func(t *testing.T, path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("netdra!\x00"), 4096), 0o600); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"a record that is no allocation", func(t *testing.T, path string) {
			put(t, path, "pool-a/dummy1", []byte("\xff\xff\xff"))
		}, `allocation "pool-a/dummy1"`},
		{"a record under another key", func(t *testing.T, path string) {
			put(t, path, "pool-a/dummy9", marshalRow(t, goodRow("dummy1")))
		}, "stored under another key"},
		{"a bad device name", withRow(func(a *statev1.Allocation) { a.DeviceName, a.PreparedDevice.Device.Name = "../eth0", "../eth0" }), "allocation.deviceName"},
		{"an unknown phase", withRow(func(a *statev1.Allocation) { a.Phase = 99 }), "phase 99"},
		{"prepared without a prepared device", withRow(func(a *statev1.Allocation) { a.PreparedDevice = nil }), "allocation.preparedDevice"},
		{"another device's prepared device", withRow(func(a *statev1.Allocation) { a.PreparedDevice.Device.Name = "eth0" }), "allocation.preparedDevice.device.name"},
		{"attached nowhere", withRow(func(a *statev1.Allocation) { a.Phase = attached }), "allocation.netnsPath"},
		{"no claim", withRow(func(a *statev1.Allocation) { a.ClaimUid = "" }), "allocation.claimUid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := []*statev1.Allocation{goodRow("dummy0"), goodRow("dummy2")}
			for i := range 400 { // spread over many pages, so a cut loses some
				rows = append(rows, goodRow(fmt.Sprintf("eth%d", i)))
			}
			path := stateFile(t, rows...)
			tt.corrupt(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(path, nil)
			if err == nil {
				s.Close()
				t.Fatal("Open loaded a corrupt file")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) ||
				!strings.Contains(err.Error(), "Move it aside (mv "+path) {
				t.Fatalf("Open: %v; want ErrCorrupt naming %s, %q and the recovery", err, path, tt.want)
			}
			t.Log(err)
			after, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(before, after) {
				t.Errorf("the refused file was changed (%v)", err)
			}
		})
	}
}

// TestOpen_FileMode: a new state file is 0600; one others may read is made
// 0600; one others may write, one of another uid, a symlink, or one in a
// directory anyone may write is refused and left as it is.
func TestOpen_FileMode(t *testing.T) {
	t.Run("new file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		s, err := Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if m := mode(t, path); m != 0o600 {
			t.Errorf("new state file has mode %#o, want 0600", m)
		}
	})
	t.Run("readable by others: made 0600", func(t *testing.T) {
		path := stateFile(t, goodRow("dummy0"))
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if m := mode(t, path); m != 0o600 {
			t.Errorf("mode %#o after Open, want 0600", m)
		}
	})
	refused := func(name string, setup func(t *testing.T, path string) string, want string) {
		t.Run(name, func(t *testing.T) {
			path := setup(t, stateFile(t, goodRow("dummy0")))
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(path, nil)
			if err == nil {
				s.Close()
				t.Fatal("Open accepted it")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Open: %v; want it to name %s and %q", err, path, want)
			}
			t.Log(err)
			if after, err := os.Lstat(path); err != nil || after.Mode() != fi.Mode() {
				t.Errorf("the refused file's mode changed: %v, %v", fi.Mode(), err)
			}
		})
	}
	chmod := func(m os.FileMode) func(t *testing.T, path string) string {
		return func(t *testing.T, path string) string {
			if err := os.Chmod(path, m); err != nil {
				t.Fatal(err)
			}
			return path
		}
	}
	refused("writable by others", chmod(0o666), "others may write it")
	refused("writable by its group", chmod(0o620), "others may write it")
	refused("a symlink", func(t *testing.T, path string) string {
		link := filepath.Join(filepath.Dir(path), "link.db")
		if err := os.Symlink(path, link); err != nil {
			t.Fatal(err)
		}
		return link
	}, "not a regular file")
	refused("in a directory anyone may write", func(t *testing.T, path string) string {
		if err := os.Chmod(filepath.Dir(path), 0o777); err != nil {
			t.Fatal(err)
		}
		return path
	}, "anyone may replace the file")
	if os.Geteuid() == 0 {
		refused("of another uid", func(t *testing.T, path string) string {
			if err := os.Chown(path, 65532, 65532); err != nil {
				t.Fatal(err)
			}
			return path
		}, "owned by uid 65532")
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestOpen_NewerSchema: a state file of another schema (a newer release's,
// met by a rollback) is refused with ErrSchema naming the file, both
// schemas and what to do, and is left as it was.
func TestOpen_NewerSchema(t *testing.T) {
	path := stateFile(t, goodRow("dummy0"))
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Put(schemaKey, []byte("7")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, nil)
	if err == nil {
		s.Close()
		t.Fatal("Open loaded a file of schema 7")
	}
	if !errors.Is(err, ErrSchema) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), `schema "7"`) || !strings.Contains(err.Error(), `reads schema "1"`) {
		t.Fatalf("Open: %v; want ErrSchema naming %s and both schemas", err, path)
	}
	t.Log(err)
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
		t.Errorf("the refused file was changed (%v)", err)
	}
}

// TestFree: a state file not there yet is free; one a store holds open is
// not (bbolt's lock, as another process's would be); once the store is
// closed it is free again, and Free itself leaves it free for the next
// Open.
func TestFree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if free, err := Free(path); !free || err != nil {
		t.Errorf("Free of a missing file: %v, %v; want free", free, err)
	}
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if free, err := Free(path); free || err != nil {
		t.Errorf("Free while a store holds it: %v, %v; want held", free, err)
	}
	s.Close()
	if free, err := Free(path); !free || err != nil {
		t.Errorf("Free after the store closed: %v, %v; want free", free, err)
	}
	s, err = Open(path, nil)
	if err != nil {
		t.Fatalf("Open after Free: %v", err)
	}
	s.Close()
}
