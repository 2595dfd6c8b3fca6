package tiltcheck

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// root is the repository, relative to this package.
const root = "../../.."

// evaluate runs the repository's Tiltfile against the stubs.
func evaluate(t *testing.T) *world {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "Tiltfile"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWorld(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.exec("Tiltfile", src); err != nil {
		t.Fatalf("evaluating the Tiltfile: %v", err)
	}
	return w
}

// yamlDocs parses every document of the YAML files matching glob.
func yamlDocs[T any](t *testing.T, glob string) []T {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, glob))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files %s (%v)", glob, err)
	}
	var out []T
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(b, []byte("\n---\n")) {
			var v T
			if err := yaml.Unmarshal(doc, &v); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, v)
		}
	}
	return out
}

// TestTiltfile evaluates the Tiltfile and checks what it declares: the
// dev overlay applied; every image of the dev overlay built through the
// Makefile with a live update of its binary; the binaries built through
// the Makefile; the node and operator workloads and the setup objects as
// resources; a grpcurl resource per gRPC socket of the node pod, and a
// health check per other socket.
func TestTiltfile(t *testing.T) {
	w := evaluate(t)

	t.Run("applies the dev overlay", func(t *testing.T) {
		ys := w.all("k8s_yaml")
		if len(ys) != 1 || ys[0].str("yaml") != "kustomize:pods/overlays/dev" {
			t.Errorf("k8s_yaml calls %v, want one of kustomize('pods/overlays/dev')", ys)
		}
	})

	t.Run("builds the binaries through the Makefile", func(t *testing.T) {
		i := slices.IndexFunc(w.all("local_resource"), func(c call) bool { return c.str("name") == "build" })
		if i < 0 {
			t.Fatal("no local_resource build")
		}
		b := w.all("local_resource")[i]
		if b.str("cmd") != "make build" {
			t.Errorf("build runs %q, want make build", b.str("cmd"))
		}
	})

	t.Run("builds every dev image with a live update", func(t *testing.T) {
		var kust struct {
			Images []struct{ Name, NewName, NewTag string } `json:"images"`
		}
		b, err := os.ReadFile(filepath.Join(root, "pods/overlays/dev/kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &kust); err != nil || len(kust.Images) == 0 {
			t.Fatalf("the dev overlay names no images (%v)", err)
		}
		builds := w.all("custom_build_with_restart")
		for _, img := range kust.Images {
			svc := path.Base(img.Name) // ghcr.io/netdra/<service>
			i := slices.IndexFunc(builds, func(c call) bool { return c.str("ref") == img.NewName })
			if i < 0 {
				t.Errorf("image %s (%s) is not built", img.NewName, img.Name)
				continue
			}
			c := builds[i]
			if want := "make image-dev SERVICE=" + svc + " "; !strings.HasPrefix(c.str("command"), want) {
				t.Errorf("%s: built by %q, want %q...", img.NewName, c.str("command"), want)
			}
			if ep := c.strings("entrypoint"); !slices.Equal(ep, []string{"/usr/local/bin/" + svc}) {
				t.Errorf("%s: entrypoint %q", img.NewName, ep)
			}
			if !slices.Contains(c.strings("deps"), "_output/"+svc) {
				t.Errorf("%s: does not rebuild when _output/%s changes: deps %q", img.NewName, svc, c.strings("deps"))
			}
			syncs := w.all("sync")
			if !slices.ContainsFunc(syncs, func(s call) bool {
				return s.str("local_path") == "_output/"+svc && s.str("remote_path") == "/usr/local/bin/"+svc
			}) {
				t.Errorf("%s: no live update syncing _output/%s to /usr/local/bin/%s", img.NewName, svc, svc)
			}
		}
		if len(builds) != len(kust.Images) {
			t.Errorf("%d images built, the dev overlay has %d", len(builds), len(kust.Images))
		}
	})

	t.Run("workloads and setup objects", func(t *testing.T) {
		objs := map[string]bool{}
		type object struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		for _, glob := range []string{"pods/base/*.yaml"} {
			for _, o := range yamlDocs[object](t, glob) {
				if o.Kind != "" && o.Kind != "Kustomization" {
					objs[o.Metadata.Name+":"+strings.ToLower(o.Kind)] = true
				}
			}
		}
		var workloads []string
		for _, r := range w.all("k8s_resource") {
			if wl := r.str("workload"); wl != "" {
				workloads = append(workloads, wl)
			}
			for _, o := range r.strings("objects") {
				if !objs[o] {
					t.Errorf("k8s_resource %s: object %s is not in pods/base", r.str("new_name"), o)
				}
			}
		}
		for _, want := range []string{"netdra-node", "netdra-sockets", "netdra-operator"} {
			if !slices.Contains(workloads, want) {
				t.Errorf("no k8s_resource for %s (have %q)", want, workloads)
			}
		}
	})

	t.Run("a resource per socket", func(t *testing.T) {
		var sets []appsv1.DaemonSet
		for _, d := range yamlDocs[appsv1.DaemonSet](t, "pods/base/*daemonset.yaml") {
			if d.Kind == "DaemonSet" && len(d.Spec.Template.Spec.Containers) > 0 {
				sets = append(sets, d)
			}
		}
		if len(sets) < 2 {
			t.Fatalf("%d DaemonSets with containers in pods/base/*daemonset.yaml, want netdra-node's and netdra-sockets'", len(sets))
		}
		locals := w.all("local_resource")
		for _, ds := range sets {
			resourcePerSocket(t, ds, locals)
		}
	})
}

// resourcePerSocket checks that each container of ds has its Tiltfile
// resource: grpcurl-<name> calling its gRPC socket, or health-<name>
// running its readiness probe for a subcommand that serves no gRPC.
func resourcePerSocket(t *testing.T, ds appsv1.DaemonSet, locals []call) {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		var socket string
		for _, a := range c.Args {
			if s, ok := strings.CutPrefix(a, "-socket="); ok {
				socket = s
			}
		}
		if len(c.Args) > 0 && !strings.HasPrefix(c.Args[0], "-") {
			// A subcommand of its image's binary (dra sockets, the
			// holder of dra's kubelet sockets): no gRPC server, its
			// resource runs its health check against its socket.
			i := slices.IndexFunc(locals, func(l call) bool { return l.str("name") == "health-"+c.Name })
			if i < 0 || c.ReadinessProbe == nil || c.ReadinessProbe.Exec == nil {
				t.Errorf("no local_resource health-%s running its readiness probe for %s", c.Name, socket)
				continue
			}
			want := "exec ds/" + ds.Name + " -c " + c.Name + " -- " + strings.Join(c.ReadinessProbe.Exec.Command, " ")
			if cmd := locals[i].str("cmd"); !strings.Contains(cmd, want) || !strings.Contains(cmd, "-socket="+socket) {
				t.Errorf("health-%s runs %q: want %q", c.Name, cmd, want)
			}
			continue
		}
		i := slices.IndexFunc(locals, func(l call) bool { return l.str("name") == "grpcurl-"+c.Name })
		if i < 0 {
			t.Errorf("no local_resource grpcurl-%s for %s", c.Name, socket)
			continue
		}
		cmd := locals[i].str("cmd")
		for _, want := range []string{"exec ds/" + ds.Name + " -c " + c.Name + " ", "grpcurl -plaintext -unix ", socket + " list"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("grpcurl-%s runs %q: no %q", c.Name, cmd, want)
			}
		}
	}
}

// TestTiltfile_StubsCatchErrors makes sure the evaluation is no formality:
// mistakes Tilt would reject, or that would make the dev loop silently
// wrong, fail it.
func TestTiltfile_StubsCatchErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"syntax", "local_resource('x',", "got end of file"},
		{"undefined built-in", "docker_compose('x.yaml')", "undefined: docker_compose"},
		{"misspelt parameter", "local_resource('x', cmd='make build', resource_dep=['y'])", "unexpected keyword argument \"resource_dep\""},
		{"missing kustomization", "k8s_yaml(kustomize('pods/overlays/nope'))", "not a kustomization"},
		{"watched path missing", "local_resource('x', cmd='make build', deps=['nope'])", "path nope"},
		{"unknown make target", "local_resource('x', cmd='make bild')", `make target "bild"`},
		{"unknown extension", "load('ext://nope', 'x')", "no stub for this module"},
		{"restart without live update", "load('ext://restart_process', 'custom_build_with_restart')\n" +
			"custom_build_with_restart(ref='a', command='make image-dev', deps=[], entrypoint=['/a'], live_update=[])", "non-empty live_update"},
		{"bad pass-through", "load('ext://restart_process', 'custom_build_with_restart')\n" +
			"custom_build_with_restart(ref='a', command='make image-dev', deps=[], entrypoint=['/a'], live_update=[sync('Makefile', '/x')], nope=1)", "unexpected keyword argument \"nope\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := newWorld(root)
			if err != nil {
				t.Fatal(err)
			}
			err = w.exec("Tiltfile", []byte(tt.src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
