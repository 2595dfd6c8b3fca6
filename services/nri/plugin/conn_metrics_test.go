package plugin

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetrics_RuntimeConnection: netdra_nri_runtime_connected is 0 until
// the runtime synchronizes the plugin, 1 from then until the connection
// closes; each synchronization is counted.
func TestMetrics_RuntimeConnection(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	w := newWorld()
	p := New(slog.New(slog.NewTextHandler(testWriter{t}, nil)), fakeState{w: w}, fakeProvisioner{w: w}, reg)
	t.Cleanup(p.Wait)
	check := func(connected, connections float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
		if got["netdra_nri_runtime_connected"] != connected || got["netdra_nri_runtime_connections_total"] != connections {
			t.Errorf("connected %v, connections %v; want %v, %v", got["netdra_nri_runtime_connected"], got["netdra_nri_runtime_connections_total"], connected, connections)
		}
	}
	check(0, 0)
	if _, err := p.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	check(1, 1)
	p.conn.setConnected(false) // what the stub's close callback does
	check(0, 1)
}
