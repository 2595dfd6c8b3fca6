package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/distribution/reference"
	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository, relative to this package.
const repoRoot = "../.."

// described is what an image is, as both pods/Dockerfile and images say it.
type described struct {
	Program    string   // the service whose binary the image runs
	Binary     string   // its path in the image
	Extras     []string // the paths of the other binaries it holds
	User       string
	Owner      string // the binaries' owner, uid:gid ("0:0" when COPY sets none)
	Entrypoint []string
	Licenses   string // the org.opencontainers.image.licenses label
}

// dockerfileImages reads pods/Dockerfile's image stages: every stage that
// copies a binary from the build stage, by name. It understands the
// instructions those stages use (FROM, COPY, USER, ENTRYPOINT in exec form,
// LABEL of the licence) and fails on anything else in them, rather than
// guess.
func dockerfileImages(t *testing.T) map[string]described {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "pods/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stages := map[string]*described{}
	var stage string
	var other []string // instructions a stage has that an image stage must not
	for _, line := range logicalLines(t, f) {
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			f := strings.Fields(rest)
			if len(f) != 3 || !strings.EqualFold(f[1], "AS") {
				t.Fatalf("FROM %s: want FROM <base> AS <name>", rest)
			}
			stage, other = f[2], nil
		case "COPY":
			f := strings.Fields(rest)
			owner := "0:0"
			if len(f) == 4 && strings.HasPrefix(f[1], "--chown=") {
				owner, f = strings.TrimPrefix(f[1], "--chown="), append(f[:1], f[2:]...)
			}
			if len(f) == 3 && f[0] == "--from=build" && stages[stage] != nil {
				stages[stage].Extras = append(stages[stage].Extras, f[2])
				if owner != stages[stage].Owner {
					t.Errorf("stage %s: %s owned by %s, its binary by %s", stage, f[2], owner, stages[stage].Owner)
				}
			} else if len(f) == 3 && f[0] == "--from=build" {
				stages[stage] = &described{Program: path.Base(f[1]), Binary: f[2], Owner: owner}
				for _, o := range other {
					t.Errorf("stage %s: %s before its binary: this test does not know what it does to the image", stage, o)
				}
			}
		case "USER":
			if d := stages[stage]; d != nil {
				d.User = rest
			}
		case "ENTRYPOINT":
			if d := stages[stage]; d != nil {
				if err := json.Unmarshal([]byte(rest), &d.Entrypoint); err != nil {
					t.Errorf("stage %s: ENTRYPOINT %s is not in exec form: %v", stage, rest, err)
				}
			}
		case "LABEL":
			k, v, ok := strings.Cut(rest, "=")
			if d := stages[stage]; d != nil && ok && k == "org.opencontainers.image.licenses" {
				if d.Licenses, err = strconv.Unquote(v); err != nil {
					t.Errorf("stage %s: LABEL %s: want the value in double quotes", stage, rest)
				}
			} else if d != nil {
				t.Errorf("stage %s: %s: this test does not know what it does to the image", stage, line)
			}
		case "ARG":
		default:
			if stages[stage] != nil {
				t.Errorf("stage %s: %s: this test does not know what it does to the image", stage, line)
			}
			other = append(other, instr)
		}
	}
	out := map[string]described{}
	for name, d := range stages {
		out[name] = *d
	}
	return out
}

// logicalLines are the Dockerfile's instructions: comments and blank lines
// dropped, continuation lines joined.
func logicalLines(t *testing.T, f *os.File) []string {
	t.Helper()
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

func builderImages() map[string]described {
	out := map[string]described{}
	for _, i := range images {
		d := described{Program: i.service, Binary: i.binary(), User: i.user(), Owner: i.user(), Entrypoint: i.entrypoint(), Licenses: DefaultLicenses}
		for _, p := range i.extras {
			d.Extras = append(d.Extras, path.Join(binDir, p.name))
		}
		out[i.service] = d
	}
	return out
}

// TestImages_MatchDockerfile: the builder and pods/Dockerfile describe the
// same five images: per service, the same binary at the same path, the
// same numeric user, the same entrypoint and the same licence label.
func TestImages_MatchDockerfile(t *testing.T) {
	want := dockerfileImages(t)
	if len(want) == 0 {
		t.Fatal("no image stage found in pods/Dockerfile: the parser reads nothing")
	}
	if diff := cmp.Diff(want, builderImages()); diff != "" {
		t.Errorf("pods/Dockerfile (-) and the builder's images (+) differ:\n%s", diff)
	}
}

// TestImages_EveryService: one image per services/*/main.go, none more.
func TestImages_EveryService(t *testing.T) {
	mains, err := filepath.Glob(filepath.Join(repoRoot, "services/*/main.go"))
	if err != nil || len(mains) == 0 {
		t.Fatalf("no services (%v)", err)
	}
	var want, got []string
	for _, m := range mains {
		want = append(want, filepath.Base(filepath.Dir(m)))
	}
	for _, i := range images {
		got = append(got, i.service)
	}
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("services (-) and images (+) differ:\n%s", diff)
	}
}

// The parts of a DaemonSet or Deployment the images must agree with.
type (
	workload struct {
		Spec struct {
			Template struct {
				Spec struct {
					SecurityContext *securityContext `json:"securityContext"`
					Containers      []container      `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	container struct {
		Name            string           `json:"name"`
		Image           string           `json:"image"`
		SecurityContext *securityContext `json:"securityContext"`
		LivenessProbe   *probe           `json:"livenessProbe"`
		ReadinessProbe  *probe           `json:"readinessProbe"`
	}
	securityContext struct {
		RunAsUser    *int  `json:"runAsUser"`
		RunAsGroup   *int  `json:"runAsGroup"`
		RunAsNonRoot *bool `json:"runAsNonRoot"`
	}
	probe struct {
		Exec *struct {
			Command []string `json:"command"`
		} `json:"exec"`
	}
)

// TestImages_MatchManifests: every netdra container in pods/base (the
// chart's default values rendered) runs the image `make images` names by
// default, <DefaultPrefix>/<service>:<the chart's appVersion> (so that
// `make images-load` gives the node what the manifests ask for), as the
// user its image has, and its exec probes run the image's binary.
func TestImages_MatchManifests(t *testing.T) {
	defaults, err := parseFlags([]string{"-root", repoRoot})
	if err != nil {
		t.Fatal(err)
	}
	if defaults.tag == "" || defaults.tag == "latest" {
		t.Errorf("make images tags the images %q by default, not a release", defaults.tag)
	}
	used := map[string]bool{}
	for _, file := range []string{"pods/base/daemonset.yaml", "pods/base/operator.yaml"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		var w workload
		if err := yaml.Unmarshal(b, &w); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		pod := w.Spec.Template.Spec
		for _, c := range pod.Containers {
			svc := checkContainer(t, file, c, pod.SecurityContext, defaults)
			used[svc] = true
		}
	}
	for _, i := range images {
		if !used[i.service] {
			t.Errorf("no container in pods/base runs image %s", i.service)
		}
	}
}

// checkContainer checks one container against its image and returns the
// image's service.
func checkContainer(t *testing.T, file string, c container, pod *securityContext, defaults config) string {
	t.Helper()
	named, err := reference.ParseNormalizedNamed(c.Image)
	if err != nil {
		t.Fatalf("%s: container %s: image %q: %v", file, c.Name, c.Image, err)
	}
	svc := path.Base(reference.Path(named))
	img, ok := lookup(svc)
	if !ok {
		t.Errorf("%s: container %s runs %s, which the builder does not build", file, c.Name, c.Image)
		return svc
	}
	built, err := imageName(defaults.prefix, svc, defaults.tag)
	if err != nil {
		t.Fatal(err)
	}
	if got := reference.TagNameOnly(named).String(); got != built.String() {
		t.Errorf("%s: container %s runs %s; make images names it %s", file, c.Name, got, built)
	}
	uid, gid, nonRoot := effective(c.SecurityContext, pod)
	if uid != nil && *uid != img.uid {
		t.Errorf("%s: container %s runs as uid %d; image %s's user is %s", file, c.Name, *uid, svc, img.user())
	}
	if gid != nil && *gid != img.gid {
		t.Errorf("%s: container %s runs as gid %d; image %s's user is %s", file, c.Name, *gid, svc, img.user())
	}
	if uid == nil && nonRoot && img.uid == 0 {
		t.Errorf("%s: container %s must run as non-root and leaves the uid to image %s, whose user is root", file, c.Name, svc)
	}
	for _, p := range []*probe{c.LivenessProbe, c.ReadinessProbe} {
		if p != nil && p.Exec != nil && (len(p.Exec.Command) == 0 || p.Exec.Command[0] != img.binary()) {
			t.Errorf("%s: container %s: probe runs %q; the image's binary is %s", file, c.Name, p.Exec.Command, img.binary())
		}
	}
	return svc
}

// effective is the uid, gid and runAsNonRoot a container gets: its own
// securityContext's, else the pod's.
func effective(c, pod *securityContext) (uid, gid *int, nonRoot bool) {
	var nr *bool
	for _, sc := range []*securityContext{c, pod} { // the container's first
		if sc == nil {
			continue
		}
		if uid == nil {
			uid = sc.RunAsUser
		}
		if gid == nil {
			gid = sc.RunAsGroup
		}
		if nr == nil {
			nr = sc.RunAsNonRoot
		}
	}
	return uid, gid, nr != nil && *nr
}

// TestRootfs_UsersKnown: every image's uid and gid have a name in the
// image's /etc/passwd and /etc/group, as under distroless.
func TestRootfs_UsersKnown(t *testing.T) {
	for _, i := range images {
		if !hasEntry(passwd, 2, i.uid) || !hasEntry(passwd, 3, i.gid) {
			t.Errorf("image %s: no /etc/passwd entry for %s", i.service, i.user())
		}
		if !hasEntry(group, 2, i.gid) {
			t.Errorf("image %s: no /etc/group entry for gid %d", i.service, i.gid)
		}
	}
}

// hasEntry says whether a line of file has id as its field'th field.
func hasEntry(file string, field, id int) bool {
	for _, l := range strings.Split(strings.TrimSpace(file), "\n") {
		if f := strings.Split(l, ":"); len(f) > field && f[field] == strconv.Itoa(id) {
			return true
		}
	}
	return false
}
