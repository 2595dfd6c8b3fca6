package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// scrape gets addr's /metrics as a Prometheus server does and returns
// every sample as "name label=value ..." (labels sorted by name) to its value; a histogram gives its count as name_count.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := name
			for _, l := range m.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[strings.Replace(key, name, name+"_count", 1)] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestMetrics: the state service serves, over HTTP at -metrics-address,
// the devices of its inventory by manager and link state, the allocations
// by phase and each address pool's size, used and free addresses, as the
// store holds them at the scrape, and its gRPC calls' counts and
// latencies.
func TestMetrics(t *testing.T) {
	sock, db := newDirs(t)
	addr := testenv.FreeAddr(t)
	startState(t, sock, db, "-metrics-address="+addr)
	c, _ := dialState(t, sock)
	ctx := testCtx(t, time.Minute)

	if _, err := c.ReplaceIPPools(ctx, &statev1.ReplaceIPPoolsRequest{Pools: []*statev1.IPPool{v4Pool, v6Pool}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReplaceDevices(ctx, &statev1.ReplaceDevicesRequest{Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, Devices: []*devicev1.Device{
		{Name: "d0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, LinkState: devicev1.LinkState_LINK_STATE_UP},
		{Name: "d1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, LinkState: devicev1.LinkState_LINK_STATE_UP},
		{Name: "d2", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, LinkState: devicev1.LinkState_LINK_STATE_DOWN},
	}}); err != nil {
		t.Fatal(err)
	}
	for n := range 3 {
		if _, err := prepareIP(ctx, c, n, &devicev1.DeviceConfig{PodIfName: "net1", IpPools: []string{"v4"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CommitPrepare(ctx, &statev1.CommitPrepareRequest{ClaimUid: "claim0", Allocations: []*statev1.PreparedAllocation{
		{Key: &statev1.AllocationKey{Pool: "pool", DeviceName: "dev0"}, PreparedDevice: &devicev1.PreparedDevice{Device: &devicev1.Device{Name: "dev0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST}}}}}); err != nil {
		t.Fatal(err)
	}

	got := scrape(t, addr)
	want := map[string]float64{
		"netdra_state_devices link_state=up manager=dummy":   2,
		"netdra_state_devices link_state=down manager=dummy": 1,
		"netdra_state_allocations phase=preparing":           2,
		"netdra_state_allocations phase=prepared":            1,
		"netdra_state_allocations phase=attached":            0,
		"netdra_state_allocations phase=freeing_failed":      0,
		"netdra_state_ip_pool_size pool=v4":                  50,
		"netdra_state_ip_pool_used pool=v4":                  3,
		"netdra_state_ip_pool_free pool=v4":                  47,
		"netdra_state_ip_pool_size pool=v6":                  256,
		"netdra_state_ip_pool_used pool=v6":                  0,
		"netdra_state_ip_pool_free pool=v6":                  256,
		"netdra_state_ip_pool_retired pool=v4":               0,
		"netdra_grpc_server_handling_seconds_count method=BeginPrepare service=netdra.state.v1.StateService":  3,
		"netdra_grpc_server_handled_total code=OK method=BeginPrepare service=netdra.state.v1.StateService":   3,
		"netdra_grpc_server_handled_total code=OK method=CommitPrepare service=netdra.state.v1.StateService":  1,
		"netdra_grpc_server_handled_total code=OK method=ReplaceIPPools service=netdra.state.v1.StateService": 1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if got["process_resident_memory_bytes"] <= 0 || got["go_goroutines"] <= 0 {
		t.Errorf("no process or Go runtime metrics: %v", got)
	}
	if t.Failed() {
		t.Log(fmt.Sprint(got))
	}
}
