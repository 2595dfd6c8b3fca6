package process

import "runtime/debug"

// version is the release the binary was built as, set by the build:
// -ldflags '-X github.com/netdra/netdra/shared/process.version=v0.4.0'
// (make build and the images set it from git describe).
var version string

// Version returns the binary's version: the one the build set, else the
// module version Go recorded (with the VCS revision when recorded), else
// "devel".
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
}
