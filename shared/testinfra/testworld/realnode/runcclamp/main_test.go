package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSpecFiles(t *testing.T) {
	got := specFiles([]string{"--root", "/r", "create", "--bundle", "/b", "--pid-file", "/p", "id"})
	if want := []specFile{{path: "/b/config.json"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("create: got %+v, want %+v", got, want)
	}
	got = specFiles([]string{"exec", "-d", "--process=/tmp/proc.json", "id"})
	if want := []specFile{{path: "/tmp/proc.json", process: true}}; !reflect.DeepEqual(got, want) {
		t.Errorf("exec: got %+v, want %+v", got, want)
	}
	if got := specFiles([]string{"state", "id"}); len(got) != 0 {
		t.Errorf("state: got %+v, want none", got)
	}
}

func TestClamp(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(p string) map[string]any {
		var v map[string]any
		b, _ := os.ReadFile(p)
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	cfg := write("config.json", `{"ociVersion":"1.2.0","process":{"args":["/pause"],"oomScoreAdj":-998},"root":{"path":"rootfs"}}`)
	if err := clamp(cfg, false, 0, false); err != nil {
		t.Fatal(err)
	}
	v := read(cfg)
	if adj := v["process"].(map[string]any)["oomScoreAdj"]; adj != 0.0 {
		t.Errorf("oomScoreAdj %v, want 0", adj)
	}
	if v["root"].(map[string]any)["path"] != "rootfs" || v["process"].(map[string]any)["args"].([]any)[0] != "/pause" {
		t.Errorf("other fields changed: %v", v)
	}
	high := write("high.json", `{"process":{"oomScoreAdj":1000}}`)
	if err := clamp(high, false, 0, false); err != nil {
		t.Fatal(err)
	}
	if adj := read(high)["process"].(map[string]any)["oomScoreAdj"]; adj != 1000.0 {
		t.Errorf("a higher score changed to %v", adj)
	}
	proc := write("proc.json", `{"args":["sh"],"oomScoreAdj":-5}`)
	if err := clamp(proc, true, 3, true); err != nil {
		t.Fatal(err)
	}
	if adj := read(proc)["oomScoreAdj"]; adj != 3.0 {
		t.Errorf("process file: oomScoreAdj %v, want 3", adj)
	}
	if err := clamp(write("bad.json", `{`), false, 0, true); err == nil {
		t.Error("a broken config.json gave no error")
	}
	huge := write("huge.json", `{"process":{"oomScoreAdj":5},"linux":{"resources":{"hugepageLimits":[{"pageSize":"2MB","limit":0}],"memory":{"limit":1}}}}`)
	if err := clamp(huge, false, 0, false); err != nil {
		t.Fatal(err)
	}
	if res := read(huge)["linux"].(map[string]any)["resources"].(map[string]any); res["hugepageLimits"] == nil {
		t.Error("hugepage limits dropped where the machine has the controller")
	}
	if err := clamp(huge, false, 0, true); err != nil {
		t.Fatal(err)
	}
	res := read(huge)["linux"].(map[string]any)["resources"].(map[string]any)
	if res["hugepageLimits"] != nil || res["memory"] == nil {
		t.Errorf("without a hugetlb controller: resources %v, want the memory limit alone", res)
	}
}
