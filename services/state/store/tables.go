package store

import (
	"github.com/cilium/statedb"
	"github.com/cilium/statedb/index"
	"google.golang.org/protobuf/reflect/protoreflect"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// The table names are the reference design's.
const (
	devicesTableName     = "netdra-devices"
	allocationsTableName = "netdra-allocations"
)

// deviceRow is a row of the devices table. Rows are immutable once inserted:
// a change inserts a new row.
type deviceRow struct{ *devicev1.Device }

func (deviceRow) TableHeader() []string { return []string{"Name", "Manager", "Interface"} }
func (r deviceRow) TableRow() []string {
	return []string{r.GetName(), r.GetManager().String(), r.GetKernelIfName()}
}

// allocRow is a row of the allocations table, immutable once inserted.
type allocRow struct{ *statev1.Allocation }

// shallowCopy returns a new row with a's fields, sharing its messages
// (the config, the prepared device) and lists: a change to a row sets
// whole fields on such a copy, and leaves what it shares as it is. A deep
// copy would give each version of a row that the watch log keeps its own
// config and prepared device, a large part of the state service's heap
// under churn.
func shallowCopy(a *statev1.Allocation) *statev1.Allocation {
	src := a.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	dst.SetUnknown(src.GetUnknown())
	return dst.Interface().(*statev1.Allocation)
}

func (allocRow) TableHeader() []string {
	return []string{"Pool", "Device", "Claim", "Pod", "Phase"}
}
func (r allocRow) TableRow() []string {
	return []string{r.GetPool(), r.GetDeviceName(), r.GetClaimUid(), r.GetPodUid(), r.GetPhase().String()}
}

// Key is the primary key of an allocation: pool, device name and, for a
// device many claims share, the allocation's share ID. Pool names and
// device names hold no '/' (share IDs neither), so "pool/device" and
// "pool/device/share" are unambiguous, and a row of a device one claim
// holds keeps the key it always had.
type Key struct {
	Pool, Device, Share string
}

func (k Key) String() string {
	if k.Share != "" {
		return k.Pool + "/" + k.Device + "/" + k.Share
	}
	return k.Pool + "/" + k.Device
}

// KeyOf returns the key of an allocation.
func KeyOf(a *statev1.Allocation) Key { return Key{a.GetPool(), a.GetDeviceName(), a.GetShareId()} }

func keyFromProto(k *statev1.AllocationKey) Key {
	return Key{k.GetPool(), k.GetDeviceName(), k.GetShareId()}
}

var (
	deviceNameIndex = statedb.Index[deviceRow, string]{
		Name:       "name",
		FromObject: func(r deviceRow) index.KeySet { return index.NewKeySet(index.String(r.GetName())) },
		FromKey:    index.String,
		FromString: index.FromString,
		Unique:     true,
	}
	deviceManagerIndex = statedb.Index[deviceRow, devicev1.DeviceManager]{
		Name: "manager",
		FromObject: func(r deviceRow) index.KeySet {
			return index.NewKeySet(index.Int32(int32(r.GetManager())))
		},
		FromKey: func(m devicev1.DeviceManager) index.Key { return index.Int32(int32(m)) },
		Unique:  false,
	}

	allocKeyIndex = statedb.Index[allocRow, Key]{
		Name:       "key",
		FromObject: func(r allocRow) index.KeySet { return index.NewKeySet(index.String(KeyOf(r.Allocation).String())) },
		FromKey:    func(k Key) index.Key { return index.String(k.String()) },
		FromString: index.FromString,
		Unique:     true,
	}
	allocClaimIndex = stringIndex("claim", (*statev1.Allocation).GetClaimUid)
	allocPodIndex   = stringIndex("pod", (*statev1.Allocation).GetPodUid)
	allocDevIndex   = stringIndex("device", (*statev1.Allocation).GetDeviceName)
)

// stringIndex is a non-unique secondary index on a string field; rows with
// the field empty are not indexed.
func stringIndex(name string, field func(*statev1.Allocation) string) statedb.Index[allocRow, string] {
	return statedb.Index[allocRow, string]{
		Name: name,
		FromObject: func(r allocRow) index.KeySet {
			if v := field(r.Allocation); v != "" {
				return index.NewKeySet(index.String(v))
			}
			return index.KeySet{}
		},
		FromKey:    index.String,
		FromString: index.FromString,
		Unique:     false,
	}
}
