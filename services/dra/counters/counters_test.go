package counters

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

type fakeProv struct {
	resp *provisionerv1.DeviceCountersResponse
	err  error
}

func (f fakeProv) DeviceCounters(context.Context, *provisionerv1.DeviceCountersRequest, ...grpc.CallOption) (*provisionerv1.DeviceCountersResponse, error) {
	return f.resp, f.err
}

type fakeState struct{ allocs []*statev1.Allocation }

func (f fakeState) ListAllocations(context.Context, *statev1.ListAllocationsRequest, ...grpc.CallOption) (*statev1.ListAllocationsResponse, error) {
	return &statev1.ListAllocationsResponse{Allocations: f.allocs}, nil
}

type fakePods map[string]string

func (f fakePods) PodName(_ context.Context, _, uid string) string { return f[uid] }

func TestCollector(t *testing.T) {
	prov := fakeProv{resp: &provisionerv1.DeviceCountersResponse{Devices: []*provisionerv1.DeviceCounters{
		{Device: "eth1", RxPackets: 2, RxBytes: 112, TxPackets: 3, TxBytes: 180,
			Drops: []*provisionerv1.PolicyDrops{{Policy: "spoofChk", Packets: 1, Bytes: 60}, {Policy: "vlan", Packets: 4, Bytes: 230}}},
		{Device: "dummy0", TxPackets: 1, TxBytes: 42}, // freed meanwhile: no allocation
	}}}
	state := fakeState{allocs: []*statev1.Allocation{
		{Pool: "uplinks", DeviceName: "eth1", ClaimNamespace: "team-a", PodUid: "uid-1"},
		{Pool: "other", DeviceName: "eth2", ClaimNamespace: "team-b", PodUid: "uid-2"},
	}}
	c := New(nil, prov, state, fakePods{"uid-1": "web-0"})
	want := map[string]float64{
		`netdra_device_bytes_total{device="eth1",direction="rx",namespace="team-a",pod="web-0",pool="uplinks"}`:              112,
		`netdra_device_bytes_total{device="eth1",direction="tx",namespace="team-a",pod="web-0",pool="uplinks"}`:              180,
		`netdra_device_dropped_bytes_total{device="eth1",namespace="team-a",pod="web-0",policy="spoofChk",pool="uplinks"}`:   60,
		`netdra_device_dropped_bytes_total{device="eth1",namespace="team-a",pod="web-0",policy="vlan",pool="uplinks"}`:       230,
		`netdra_device_dropped_packets_total{device="eth1",namespace="team-a",pod="web-0",policy="spoofChk",pool="uplinks"}`: 1,
		`netdra_device_dropped_packets_total{device="eth1",namespace="team-a",pod="web-0",policy="vlan",pool="uplinks"}`:     4,
		`netdra_device_packets_total{device="eth1",direction="rx",namespace="team-a",pod="web-0",pool="uplinks"}`:            2,
		`netdra_device_packets_total{device="eth1",direction="tx",namespace="team-a",pod="web-0",pool="uplinks"}`:            3,
		`netdra_device_counters_up{}`: 1,
	}
	if diff := cmp.Diff(want, gather(t, c)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}

	// Without a pod name, the pod label is the UID.
	got := gather(t, New(nil, prov, state, fakePods{}))
	if _, ok := got[`netdra_device_packets_total{device="eth1",direction="rx",namespace="team-a",pod="uid-1",pool="uplinks"}`]; !ok {
		t.Errorf("no series with pod=uid-1: %v", got)
	}
}

// gather collects c in a pedantic registry and flattens the series.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

func TestCollector_ProvisionerDown(t *testing.T) {
	c := New(nil, fakeProv{err: errors.New("unavailable")}, fakeState{}, nil)
	if diff := cmp.Diff(map[string]float64{`netdra_device_counters_up{}`: 0}, gather(t, c)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
