package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

var (
	allocBucket = []byte("allocations")
	metaBucket  = []byte("meta")
	schemaKey   = []byte("schema")
	schema      = []byte("1")
)

// file is the allocation table's write-through copy on disk. Every write is
// one bbolt transaction, fsynced before the in-memory table commits.
type file struct {
	db *bolt.DB
	// commits counts the allocation transactions apply ran (under
	// Store.mu): the writes' groups.
	commits int
}

// ErrCorrupt: the state file cannot be read back as netdra wrote it. The
// state service then refuses to start rather than serve part of it.
var ErrCorrupt = errors.New("state file is corrupt")

// ErrSchema: the state file was written in a schema this build does not
// read (a newer netdra wrote it, and this one is a rollback). The state
// service then refuses to start rather than misread it.
var ErrSchema = errors.New("state file has another schema")

// schemaError is inspect's error for a file of schema got.
type schemaError struct{ got string }

func (e schemaError) Error() string { return fmt.Sprintf("schema %q, want %q", e.got, schema) }

// corrupt wraps what is wrong with the file at path in ErrCorrupt, with
// what to do about it.
func corrupt(path string, err error) error {
	return fmt.Errorf("%w: %s: %w; the state service will not start on it. "+
		"Move it aside (mv %s %s.corrupt) and restart: dra rebuilds the allocations from the claims' status "+
		"(interrupted prepares and frees awaiting a retry are not in a claim; see docs/architecture.md, The state service)",
		ErrCorrupt, path, err, path, path)
}

// openFile opens the bbolt file at path (created 0600 when missing) and
// checks it (check, the schema); a file netdra did not write, or that
// bbolt cannot read, is ErrCorrupt. An existing file is not written to:
// a fresh one gets its buckets.
func openFile(path string) (*file, error) {
	var db *bolt.DB
	err := guard(func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
		return err
	})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("opening %s: another process holds it: %w", path, err)
	}
	if err != nil {
		return nil, corrupt(path, err)
	}
	fresh, err := inspect(db)
	if err == nil && fresh {
		err = db.Update(func(tx *bolt.Tx) error {
			meta, err := tx.CreateBucketIfNotExists(metaBucket)
			if err == nil {
				err = meta.Put(schemaKey, schema)
			}
			if err == nil {
				_, err = tx.CreateBucketIfNotExists(allocBucket)
			}
			return err
		})
	}
	var se schemaError
	if errors.As(err, &se) {
		_ = db.Close()
		return nil, fmt.Errorf("%w: %s has schema %q, and this netdra reads schema %q: a newer release wrote it. "+
			"Go back to that release (or a later one), or move the file aside (mv %s %s.schema-%s) and restart: dra rebuilds "+
			"the allocations from the claims' status", ErrSchema, path, se.got, schema, path, path, se.got)
	}
	if err != nil {
		_ = db.Close()
		return nil, corrupt(path, err)
	}
	return &file{db: db}, nil
}

// inspect checks an open file (check) and its schema, and reports whether
// it is fresh (no bucket yet). A file with some of netdra's buckets but
// not all is not one netdra wrote.
func inspect(db *bolt.DB) (fresh bool, err error) {
	if err := check(db); err != nil {
		return false, err
	}
	err = db.View(func(tx *bolt.Tx) error {
		meta, allocs := tx.Bucket(metaBucket), tx.Bucket(allocBucket)
		var v []byte
		if meta != nil {
			v = meta.Get(schemaKey)
		}
		switch {
		case meta == nil && allocs == nil:
			fresh = true
		case meta == nil || allocs == nil || v == nil:
			return fmt.Errorf("bucket %q or %q or the schema is missing", metaBucket, allocBucket)
		case string(v) != string(schema):
			return schemaError{got: string(v)}
		}
		return nil
	})
	return fresh, err
}

// guard runs f, which reads the file, and turns a panic of bbolt's on a
// page it cannot make sense of into an error. A page past the end of a
// cut file faults in the mmap: a panic here too, not the end of the
// process.
func guard(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("unreadable page: %v", r)
		}
	}()
	return f()
}

// check runs bbolt's consistency check over the whole file (pages, free
// list, every bucket's tree).
func check(db *bolt.DB) error {
	return guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			var errs []error
			for e := range tx.Check() {
				if len(errs) < 3 {
					errs = append(errs, e)
				}
			}
			return errors.Join(errs...)
		})
	})
}

// load returns every allocation in the file, each checked (loadedRow).
func (f *file) load() ([]*statev1.Allocation, error) {
	var out []*statev1.Allocation
	err := guard(func() error {
		return f.db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(allocBucket).ForEach(func(k, v []byte) error {
				a, err := loadedRow(k, v)
				if err != nil {
					return fmt.Errorf("allocation %q: %w", k, err)
				}
				out = append(out, a)
				return nil
			})
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// loadedRow decodes one allocation of the file and checks it as the
// requests that wrote it were checked: its key, identity fields, phase,
// the prepared device a committed row needs, the netns of an attached
// one.
func loadedRow(k, v []byte) (*statev1.Allocation, error) {
	a := &statev1.Allocation{}
	if err := proto.Unmarshal(v, a); err != nil {
		return nil, err
	}
	if err := validAllocation("allocation", a); err != nil {
		return nil, err
	}
	if got := KeyOf(a).String(); got != string(k) {
		return nil, fmt.Errorf("stored under another key: the row is %s", got)
	}
	ph := a.GetPhase()
	if _, ok := statev1.Phase_name[int32(ph)]; !ok || ph == statev1.Phase_PHASE_UNSPECIFIED {
		return nil, fmt.Errorf("phase %d is not one netdra writes", ph)
	}
	if pd := a.GetPreparedDevice(); pd != nil || ph == prepared || ph == attached {
		if err := validPrepared("allocation.preparedDevice", pd, a.GetDeviceName()); err != nil {
			return nil, err
		}
	}
	if ph == attached {
		if err := validNetns("allocation.netnsPath", a.GetNetnsPath()); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// apply writes puts and deletes in one transaction.
func (f *file) apply(puts []*statev1.Allocation, dels []Key) error {
	if len(puts) == 0 && len(dels) == 0 {
		return nil
	}
	f.commits++
	return f.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(allocBucket)
		for _, k := range dels {
			if err := b.Delete([]byte(k.String())); err != nil {
				return err
			}
		}
		for _, a := range puts {
			v, err := proto.Marshal(a)
			if err != nil {
				return fmt.Errorf("encoding %s: %w", KeyOf(a), err)
			}
			if err := b.Put([]byte(KeyOf(a).String()), v); err != nil {
				return err
			}
		}
		return nil
	})
}

func (f *file) close() error { return f.db.Close() }

// Free says whether the state file at path could be opened now: no
// process holds its lock (bbolt's flock, which every release of the state
// service takes while it runs). A file not there yet is free. It takes the
// lock and lets it go at once, so the caller's Open may still find it
// held, by a third process.
func Free(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("state file: %w", err)
	}
	defer f.Close()
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("state file %s: %w", path, err)
	}
	return true, nil
}
