package api_test

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/hostiletest"
)

// hostileSeed is the store every hostile request meets: an inventory, an
// intent (PREPARING), a prepared allocation and address pools, so that
// each base below succeeds.
var hostileSeed = []struct{ method, body string }{
	{"ReplaceDevices", `{"manager":"DEVICE_MANAGER_DUMMY","devices":[{"name":"dummy0","kernelIfName":"dummy0"},{"name":"dummy1","kernelIfName":"dummy1"},
		{"name":"dummy2","kernelIfName":"dummy2"},{"name":"dummy3","kernelIfName":"dummy3"},{"name":"dummy4","kernelIfName":"dummy4"}]}`},
	{"ReplaceIPPools", `{"pools":[{"name":"v4","subnet":"10.1.0.0/24","gateway":"10.1.0.1"}]}`},
	{"BeginPrepare", `{"allocations":[{"pool":"p","deviceName":"dummy1","manager":"DEVICE_MANAGER_DUMMY","claimUid":"c-prep","claimNamespace":"ns","claimName":"a"}]}`},
	{"BeginPrepare", `{"allocations":[{"pool":"p","deviceName":"dummy2","manager":"DEVICE_MANAGER_DUMMY","claimUid":"c-done","claimNamespace":"ns","claimName":"b","podUid":"pod-2"}]}`},
	{"CommitPrepare", `{"claimUid":"c-done","allocations":[{"key":{"pool":"p","deviceName":"dummy2"},"preparedDevice":{"device":{"name":"dummy2"}}}]}`},
}

const preparedDummy1 = `{"device":{"name":"dummy1","manager":"DEVICE_MANAGER_DUMMY","kernelIfName":"dummy1"},"originalLink":{"name":"dummy1","macAddress":"02:00:00:00:00:01","mtu":1500},"linkCreated":true}`

// hostileBases are a valid request of every StateService method, each of
// which succeeds on the seeded store.
var hostileBases = map[string][]string{
	"ReplaceDevices": {`{"manager":"DEVICE_MANAGER_DUMMY","devices":[{"name":"dummy0","kernelIfName":"dummy0","pciAddress":"0000:03:00.1","pfName":"ens1f0",
		"vfIndex":1,"vendorId":"0x8086","deviceId":"0x1889","driver":"iavf","numaNode":0,"pcieRoot":"pci0000:00","macAddress":"02:00:00:00:00:01","mtu":1500,
		"attributes":{"a":"b"},"linkState":"LINK_STATE_UP"},{"name":"dummy1"},{"name":"dummy2"},{"name":"dummy3"},{"name":"dummy4"}]}`},
	"ListDevices": {`{"manager":"DEVICE_MANAGER_DUMMY"}`},
	"BeginPrepare": {`{"allocations":[{"pool":"p","deviceName":"dummy3","manager":"DEVICE_MANAGER_DUMMY","claimUid":"c-new","claimNamespace":"ns","claimName":"c",
		"request":"net","podUid":"pod-3","config":{"podIfName":"net1","vlan":5,"vlanQos":1,"vlanProto":"VLAN_PROTO_8021Q","macAddress":"02:00:00:00:00:03",
		"spoofChk":true,"trust":false,"linkState":"VF_LINK_STATE_AUTO","minTxRate":1,"maxTxRate":10,"mtu":1400,"addresses":["10.2.0.2/24"],
		"routes":[{"destination":"10.3.0.0/16","gateway":"10.2.0.1"}],"ipPools":["v4"]}}]}`},
	"CommitPrepare":  {`{"claimUid":"c-prep","allocations":[{"key":{"pool":"p","deviceName":"dummy1"},"preparedDevice":` + preparedDummy1 + `}]}`},
	"RecordPrepared": {`{"claimUid":"c-prep","allocations":[{"key":{"pool":"p","deviceName":"dummy1"},"preparedDevice":` + preparedDummy1 + `}]}`},
	"AbortPrepare":   {`{"claimUid":"c-prep","keys":[{"pool":"p","deviceName":"dummy1"}]}`},
	"RestoreAllocations": {`{"allocations":[{"pool":"p","deviceName":"dummy4","manager":"DEVICE_MANAGER_DUMMY","claimUid":"c-restored","claimNamespace":"ns",
		"claimName":"d","request":"net","podUid":"pod-4","config":{"podIfName":"net1","addresses":["10.2.0.4/24"]},
		"preparedDevice":{"device":{"name":"dummy4","manager":"DEVICE_MANAGER_DUMMY"},"originalLink":{"name":"dummy4"}}}]}`},
	"ListAllocations": {`{"claimUid":"c-done","podUid":"pod-2","deviceName":"dummy2","phase":"PHASE_PREPARED"}`},
	"MarkAttached": {`{"key":{"pool":"p","deviceName":"dummy2"},"podUid":"pod-2","netnsPath":"/var/run/netns/pod",
		"preparedDevice":{"device":{"name":"dummy2","manager":"DEVICE_MANAGER_DUMMY"}}}`},
	"MarkAttachFailed": {`{"key":{"pool":"p","deviceName":"dummy2"},"error":"vrf: this node's kernel has no VRF devices"}`},
	"MarkDetached":     {`{"key":{"pool":"p","deviceName":"dummy2"}}`},
	"MarkFreeFailed":   {`{"key":{"pool":"p","deviceName":"dummy2"},"error":"freeing dummy2: boom"}`},
	"DeleteAllocation": {`{"key":{"pool":"p","deviceName":"dummy2"},"claimUid":"c-done"}`},
	"Watch":            {`{"epoch":"0123456789abcdef","revision":3}`},
	"Dump":             {`{}`},
	"ReplaceIPPools": {`{"pools":[{"name":"v4","subnet":"10.1.0.0/24","rangeStart":"10.1.0.10","rangeEnd":"10.1.0.99","gateway":"10.1.0.1",
		"routes":[{"destination":"0.0.0.0/0"},{"destination":"10.9.0.0/16","gateway":"10.1.0.2"}],"exclude":["10.1.0.16/30","10.1.0.50"]},{"name":"v6","subnet":"fd00::/64"}]}`},
	"ListIPPools": {`{}`},
}

// TestHostileRequests sends every StateService method, over the real
// socket, the zero request and each base varied field by field (1 MiB
// strings, 10,000-entry lists and maps, enum 999, extreme integers): the
// answer is success or InvalidArgument naming the field, and a refused
// request leaves the store as it was (Dump, revision included).
func TestHostileRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("sends thousands of requests, some of MiBs")
	}
	sd := statev1.File_netdra_state_v1_state_proto.Services().ByName("StateService")
	var svc *service
	reset := func(t *testing.T) {
		if svc != nil {
			svc.stop()
		}
		svc = startService(t, filepath.Join(fastDir(t), "state.db"))
		for _, s := range hostileSeed {
			if _, err := svc.invoke(s.method, s.body); err != nil {
				t.Fatalf("seeding: %s: %v", s.method, err)
			}
		}
	}
	hostiletest.Run(t, sd, requests(t, sd, hostileBases), &hostiletest.Target{
		Conn: func() grpc.ClientConnInterface { return svc.conn },
		State: func(t *testing.T) any {
			d, err := svc.invoke("Dump", "{}")
			if err != nil {
				t.Fatalf("Dump: %v", err)
			}
			return d
		},
		Reset: reset,
	})
}

// requests parses the JSON bases into each method's request type.
func requests(t testing.TB, sd protoreflect.ServiceDescriptor, bases map[string][]string) map[string][]proto.Message {
	out := map[string][]proto.Message{}
	for name, bodies := range bases {
		md := sd.Methods().ByName(protoreflect.Name(name))
		if md == nil {
			t.Fatalf("no method %s", name)
		}
		for _, b := range bodies {
			m := newMessage(t, md.Input())
			if err := protojson.Unmarshal([]byte(b), m); err != nil {
				t.Fatalf("%s base %s: %v", name, b, err)
			}
			out[name] = append(out[name], m)
		}
	}
	return out
}

// fastDir is a folder on tmpfs when there is one: the store fsyncs every
// write, and the test resets it after every request that changed it.
func fastDir(t testing.TB) string {
	dir, err := os.MkdirTemp("/dev/shm", "ndst")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
