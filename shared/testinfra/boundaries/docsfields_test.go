package boundaries

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	_ "github.com/netdra/netdra/protos/netdra/device/v1"
	_ "github.com/netdra/netdra/protos/netdra/dra/v1"
	_ "github.com/netdra/netdra/protos/netdra/nri/v1"
	_ "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	_ "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/claimconfig"
)

// fieldSpan matches a code span that names a field: a camelCase name, or
// a dotted path of names (with [] or [N] for a list's entries), with a
// value after ": " or not.
var fieldSpan = regexp.MustCompile(`^([a-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+|\[\]|\[N\])*)(?:: ?\S.*)?$`)

// outsideFields are dotted or camelCase names the documentation gives
// that no netdra schema holds, each with whose it is.
var outsideFields = map[string]string{
	"grpc.health.v1.Health":           "gRPC's health service",
	"io.kubernetes.pod.uid":           "the kubelet's container label",
	"org.opencontainers.image.source": "the OCI image annotation",
	"netdra.io":                       "the driver's name, a value",
	"appVersion":                      "Chart.yaml's field (helm)",
	"newTag":                          "kustomize's images field",
	"issmN":                           "an RDMA device node's name",
	"umadN":                           "an RDMA device node's name",
	"uverbsN":                         "an RDMA device node's name",
	"v0.4.0":                          "a version, an example",
	"crio.conf":                       "CRI-O's configuration file",
	"crio.conf.d":                     "CRI-O's drop-in folder",
}

// schemas are the field paths netdra's documentation may name, from the
// sources of truth: the CRDs (pods/base/crds.yaml), the chart's
// values.yaml, the claim parameters (claimconfig.Reference and its
// sysctls), the protos' messages (their JSON names) and services, the
// Kubernetes objects netdra reads and writes (their JSON names), and the
// Go names of this repository (package.Name, package.Type.Field). A path
// segment "*" stands for any key of a map.
type schemas struct {
	paths [][]string
	names map[string]bool // whole names: proto services and messages, Go names
}

func (s *schemas) add(p []string) { s.paths = append(s.paths, clonePath(p)) }

func clonePath(p []string) []string { return append([]string(nil), p...) }

// has says whether path is a run of segments of some known path, one
// of them at least matched by name.
func (s *schemas) has(path []string) bool {
	if s.names[strings.Join(path, ".")] {
		return true
	}
	for _, k := range s.paths {
	offsets:
		for i := 0; i+len(path) <= len(k); i++ {
			named := false // a map's key alone matches no name
			for j, seg := range path {
				if k[i+j] != "*" && k[i+j] != seg {
					continue offsets
				}
				named = named || k[i+j] == seg
			}
			if named {
				return true
			}
		}
	}
	return false
}

// openAPI adds every property path of an OpenAPI schema.
func (s *schemas) openAPI(v any, prefix []string) {
	m, ok := v.(map[string]any)
	if !ok || len(prefix) > 12 {
		return
	}
	if props, ok := m["properties"].(map[string]any); ok {
		for k, p := range props {
			path := append(clonePath(prefix), k)
			s.add(path)
			s.openAPI(p, path)
		}
	}
	if items, ok := m["items"]; ok {
		s.openAPI(items, prefix)
	}
	if ap, ok := m["additionalProperties"].(map[string]any); ok {
		path := append(clonePath(prefix), "*")
		s.add(path)
		s.openAPI(ap, path)
	}
}

// yamlTree adds every key path of a YAML value.
func (s *schemas) yamlTree(v any, prefix []string) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			path := append(clonePath(prefix), strings.Split(k, ".")...)
			s.add(path)
			s.yamlTree(c, path)
		}
	case []any:
		for _, c := range v {
			s.yamlTree(c, prefix)
		}
	}
}

// goType adds the JSON paths of a Go type, as encoding/json names them.
func (s *schemas) goType(t reflect.Type, prefix []string, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if len(prefix) > 8 || seen[t] {
		return
	}
	switch t.Kind() {
	case reflect.Map:
		path := append(clonePath(prefix), "*")
		s.add(path)
		s.goType(t.Elem(), path, seen)
	case reflect.Struct:
		seen[t] = true
		defer delete(seen, t)
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
				s.goType(f.Type, prefix, seen)
				continue
			}
			if name == "" {
				name = f.Name
			}
			path := append(clonePath(prefix), name)
			s.add(path)
			s.goType(f.Type, path, seen)
		}
	}
}

// proto adds the JSON paths of a message, and its full name.
func (s *schemas) proto(md protoreflect.MessageDescriptor, prefix []string, depth int) {
	if depth > 6 {
		return
	}
	s.names[string(md.FullName())] = true
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		for _, name := range []string{f.JSONName(), string(f.Name())} {
			path := append(clonePath(prefix), name)
			s.add(path)
			if f.Message() != nil && !f.IsMap() {
				s.proto(f.Message(), path, depth+1)
			}
		}
	}
}

// goNames adds package.Name and package.Type.Field for the declarations
// of the Go files under dir.
func (s *schemas) goNames(t *testing.T, dir string) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == "testdata" || e.Name() == ".tools" || e.Name() == "_output" || e.Name() == ".git") {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := f.Name.Name
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					s.names[pkg+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						s.names[pkg+"."+sp.Name.Name] = true
						if st, ok := sp.Type.(*ast.StructType); ok {
							for _, f := range st.Fields.List {
								for _, n := range f.Names {
									s.names[pkg+"."+sp.Name.Name+"."+n.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							s.names[pkg+"."+n.Name] = true
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readSchemas(t *testing.T, root string) *schemas {
	t.Helper()
	s := &schemas{names: map[string]bool{}}
	for _, crd := range readYAMLDocs(t, filepath.Join(root, "pods/base/crds.yaml")) {
		var c struct {
			Spec struct {
				Versions []struct {
					Schema struct {
						OpenAPIV3Schema any `json:"openAPIV3Schema"`
					}
				}
			}
		}
		b, _ := yaml.Marshal(crd)
		if err := yaml.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		for _, v := range c.Spec.Versions {
			s.openAPI(v.Schema.OpenAPIV3Schema, nil)
		}
	}
	values := readYAMLDocs(t, filepath.Join(root, "pods/chart/netdra/values.yaml"))
	s.yamlTree(values, nil)
	for _, p := range claimconfig.Reference {
		s.add(strings.Split(strings.ReplaceAll(p.Name, "[]", ""), "."))
	}
	for k := range claimconfig.Sysctls {
		s.add(append([]string{"sysctls"}, strings.Split(k, ".")...))
	}
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "netdra.") {
			return true
		}
		for i := 0; i < fd.Messages().Len(); i++ {
			s.proto(fd.Messages().Get(i), nil, 0)
		}
		for i := 0; i < fd.Services().Len(); i++ {
			s.names[string(fd.Services().Get(i).FullName())] = true
		}
		return true
	})
	for _, obj := range []any{resourcev1.ResourceClaim{}, resourcev1.ResourceSlice{}, resourcev1.DeviceClass{}, corev1.Pod{}, appsv1.DaemonSet{}} {
		s.goType(reflect.TypeOf(obj), nil, map[reflect.Type]bool{})
	}
	s.goNames(t, root)
	return s
}

// TestDocsNameFieldsThatExist checks every field a code span of the
// documentation names (a camelCase name or a dotted path: `vfCount`,
// `spec.addressPools`, `metrics.podMonitor.enabled`, `routes[].table`,
// `netdra.state.v1.StateService`, `realnode.Config.Runtime`) against the
// schemas it may come from (schemas: the CRDs, values.yaml, the claim
// parameters, the protos, the Kubernetes objects, the Go code), or the
// short list of outside names; a name in the ResourceSlices' attributes
// is a string of services/dra. So a field renamed or removed in its
// source cannot stay documented.
func TestDocsNameFieldsThatExist(t *testing.T) {
	root := moduleRoot(t)
	s := readSchemas(t, root)
	attrs := goLiterals(t, root, "services/dra")
	files := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() && (e.Name() == ".git" || e.Name() == ".tools" || e.Name() == "_output") {
			return filepath.SkipDir
		}
		files[e.Name()] = true
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !s.has([]string{"spec", "addressPools"}) || !s.has([]string{"routes", "table"}) || !s.has([]string{"metrics", "loopback"}) {
		t.Fatalf("the schemas miss fields they have (%d paths): their sources have moved", len(s.paths))
	}
	checked := 0
	for _, d := range docs(t, root) {
		for i, line := range strings.Split(prose(d.text), "\n") {
			for _, span := range codeSpan.FindAllString(line, -1) {
				span = strings.TrimSpace(strings.Trim(span, "`"))
				m := fieldSpan.FindStringSubmatch(span)
				if m == nil || !strings.ContainsAny(m[1], "ABCDEFGHIJKLMNOPQRSTUVWXYZ.[") {
					continue
				}
				name := m[1]
				if outsideFields[name] != "" || files[name] {
					continue // an outside name, a file (TestDocsNameFilesThatExist)
				}
				checked++
				clean := strings.NewReplacer("[]", "", "[N]", "").Replace(name)
				if s.has(strings.Split(clean, ".")) || attrs[clean] {
					continue
				}
				t.Errorf("%s:%d: `%s`: no field %s in the CRDs, values.yaml, the claim parameters, the protos, the Kubernetes objects or the Go code", d.rel, i+1, span, name)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no field names in the documentation: the pattern has drifted")
	}
	t.Logf("checked %d field names against %d schema paths", checked, len(s.paths))
}
