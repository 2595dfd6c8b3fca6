package realnode

import "testing"

// TestPluginInLog reads the kubelet v1.37's own lines (logger= comes
// between the message and driverName=).
func TestPluginInLog(t *testing.T) {
	const log = `I1201 15:09:34.542131    2901 plugin_watcher.go:201] "Adding socket path or updating timestamp to desired state cache" path="/k/plugins_registry/netdra.io-reg.sock"
I1201 15:09:34.579187    2901 dra_plugin_manager.go:140] "Connection changed" logger="DRA registration handler" driverName="netdra.io" endpoint="/k/plugins/netdra.io/dra.sock" connected=true
I1201 15:09:34.579190    2901 dra_plugin_manager.go:140] "Connection changed" logger="DRA registration handler" driverName="other.io" endpoint="/k/plugins/other.io/dra.sock" connected=false
`
	if ep, ok := pluginInLog(log, "netdra.io"); !ok || ep != "/k/plugins/netdra.io/dra.sock" {
		t.Errorf("connected: got %q, %v", ep, ok)
	}
	gone := log + `I1201 15:09:40.000000    2901 dra_plugin_manager.go:140] "Connection changed" logger="DRA registration handler" driverName="netdra.io" endpoint="/k/plugins/netdra.io/dra.sock" connected=false` + "\n"
	if _, ok := pluginInLog(gone, "netdra.io"); ok {
		t.Error("a later connected=false reads as connected")
	}
	if _, ok := pluginInLog(log, "missing.io"); ok {
		t.Error("a driver never logged reads as connected")
	}
}
