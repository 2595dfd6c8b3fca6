package store

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
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
}

func openFile(path string) (*file, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		if v := meta.Get(schemaKey); v != nil && string(v) != string(schema) {
			return fmt.Errorf("schema %q, want %q", v, schema)
		}
		if err := meta.Put(schemaKey, schema); err != nil {
			return err
		}
		_, err = tx.CreateBucketIfNotExists(allocBucket)
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("initializing %s: %w", path, err)
	}
	return &file{db: db}, nil
}

// load returns every allocation in the file.
func (f *file) load() ([]*statev1.Allocation, error) {
	var out []*statev1.Allocation
	err := f.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(allocBucket).ForEach(func(k, v []byte) error {
			a := &statev1.Allocation{}
			if err := proto.Unmarshal(v, a); err != nil {
				return fmt.Errorf("allocation %q: %w", k, err)
			}
			out = append(out, a)
			return nil
		})
	})
	return out, err
}

// apply writes puts and deletes in one transaction.
func (f *file) apply(puts []*statev1.Allocation, dels []Key) error {
	if len(puts) == 0 && len(dels) == 0 {
		return nil
	}
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
