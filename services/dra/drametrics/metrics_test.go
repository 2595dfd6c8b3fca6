package drametrics

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/dra/publish"
)

// fakePlugin answers each claim with an error when its name says so.
type fakePlugin struct{ kubeletplugin.DRAPlugin }

func (fakePlugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		var err error
		if strings.HasPrefix(c.Name, "bad") {
			err = errors.New("refused")
		}
		out[c.UID] = kubeletplugin.PrepareResult{Err: err}
	}
	return out, nil
}

func (fakePlugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	if len(claims) > 1 {
		return nil, errors.New("state service unreachable")
	}
	return map[types.UID]error{claims[0].UID: nil}, nil
}

func claim(name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
}

// TestMetrics: prepare and unprepare counted per claim and result (each
// at 0 before the first call), timed per call; published devices per pool
// (a pool that is gone is dropped) and those tainted unhealthy, the time
// of the last publication; devices found lost.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	if mfs, err := reg.Gather(); err != nil {
		t.Fatal(err)
	} else if i := slices.IndexFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "netdra_dra_claims_total" }); i < 0 ||
		len(mfs[i].GetMetric()) != 4 || slices.ContainsFunc(mfs[i].GetMetric(), func(m *dto.Metric) bool { return m.GetCounter().GetValue() != 0 }) {
		t.Errorf("before any call: claims_total %v, want 4 series at 0", mfs)
	}
	p := m.Wrap(fakePlugin{})
	ctx := context.Background()
	if _, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("a"), claim("bad1"), claim("b")}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "uid-a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: "uid-a"}, {UID: "uid-b"}}); err == nil {
		t.Fatal("want the unprepare error")
	}
	pool := func(name string, n int) publish.Pool {
		return publish.Pool{Name: name, Devices: make([]*devicev1.Device, n)}
	}
	m.Published([]publish.Pool{pool("red", 2), pool("gone", 1)})
	red := pool("red", 3)
	red.Devices[2] = &devicev1.Device{Name: "down", LinkState: devicev1.LinkState_LINK_STATE_DOWN}
	m.Published([]publish.Pool{red, pool("empty", 0)})
	m.DeviceLost()
	(*Metrics)(nil).DeviceLost() // a driver without metrics

	got := gathered(t, reg)
	if got["netdra_dra_last_publish_timestamp_seconds"] <= 0 {
		t.Errorf("last publish time not set: %v", got)
	}
	delete(got, "netdra_dra_last_publish_timestamp_seconds")
	want := map[string]float64{
		"netdra_dra_claims_total op=prepare result=error":     1,
		"netdra_dra_claims_total op=prepare result=ok":        2,
		"netdra_dra_claims_total op=unprepare result=error":   2,
		"netdra_dra_claims_total op=unprepare result=ok":      1,
		"netdra_dra_call_duration_seconds op=prepare count":   1,
		"netdra_dra_call_duration_seconds op=unprepare count": 2,
		"netdra_dra_published_devices pool=empty":             0,
		"netdra_dra_published_devices pool=red":               3,
		"netdra_dra_tainted_devices pool=empty":               0,
		"netdra_dra_tainted_devices pool=red":                 1,
		"netdra_dra_devices_lost_total":                       1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// gathered is reg's samples by name and labels ("name label=value ..."):
// a counter's or gauge's value, a histogram's sample count (the key ends
// in " count").
func gathered(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				got[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				got[key+" count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return got
}
