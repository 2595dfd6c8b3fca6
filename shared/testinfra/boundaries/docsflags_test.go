package boundaries

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/netdra/netdra/services/cli/command"
)

// flagMethods are the flag package's methods that define a flag: the
// name is the first argument, or the second of a ...Var (pflag's XxxP
// has the shorthand after the name).
var flagMethods = map[string]int{
	"String": 0, "Bool": 0, "Int": 0, "Int64": 0, "Uint": 0, "Uint64": 0,
	"Float64": 0, "Duration": 0, "Func": 0, "BoolFunc": 0,
	"StringVar": 1, "BoolVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1,
	"Uint64Var": 1, "Float64Var": 1, "DurationVar": 1, "Var": 1, "TextVar": 1,
}

// otherFlags are flags the documentation names, in a code span of their
// own, of programs that are not netdra's, each with whose it is.
var otherFlags = map[string]string{
	"trimpath": "go build's", "tags": "go build's", "s": "the linker's", "w": "the linker's",
	"c": "kubectl's container", "server-side": "kubectl apply's", "previous": "kubectl logs'",
	"root-dir": "the kubelet's", "strict": "helm lint's",
}

// programs are netdra's programs as the documentation calls them, each
// with its module (a folder of the repository) and its main package there.
var programs = map[string][2]string{
	"state":         {".", "./services/state"},
	"provisioner":   {".", "./services/provisioner"},
	"dra":           {".", "./services/dra"},
	"nri":           {".", "./services/nri"},
	"operator":      {".", "./services/operator"},
	"netdra-hook":   {".", "./services/nri/cmd/netdra-hook"},
	"chartgen":      {".", "./pods/chartgen"},
	"benchreport":   {"bench/cmd", "./benchreport"},
	"testworld":     {"shared/testinfra/testworld", "./cmd/testworld"},
	"control-plane": {"shared/testinfra/testworld", "./cmd/testworld"}, // the testworld binary's subcommand
	"devdemo":       {"shared/testinfra/testworld", "./cmd/devdemo"},
}

// dirFlags is what the Go files of one folder say of flags: the names
// given as literals to the flag (or pflag) package's calls, the constants
// given instead (by their names), the literal defaults, and the folder's
// string constants.
type dirFlags struct {
	names    map[string]bool
	defaults map[string][]string // a flag's default, when a literal
	refs     map[string]bool
	consts   map[string]string
}

func readDirFlags(t *testing.T, dir string) dirFlags {
	t.Helper()
	out := dirFlags{names: map[string]bool{}, defaults: map[string][]string{}, refs: map[string]bool{}, consts: map[string]string{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if spec, ok := n.(*ast.ValueSpec); ok {
				for i, id := range spec.Names {
					if i < len(spec.Values) {
						if lit, ok := spec.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if v, err := strconv.Unquote(lit.Value); err == nil {
								out.consts[id.Name] = v
							}
						}
					}
				}
				return true
			}
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			name := sel.Sel.Name
			shorthand := strings.HasSuffix(name, "P")
			i, ok := flagMethods[strings.TrimSuffix(name, "P")]
			if !ok {
				i, ok = flagMethods[name]
				shorthand = false
			}
			if !ok {
				return true
			}
			args := []int{i}
			if shorthand {
				args = append(args, i+1)
			}
			for _, a := range args {
				if len(call.Args) <= a {
					continue
				}
				switch arg := call.Args[a].(type) {
				case *ast.BasicLit:
					if v, err := strconv.Unquote(arg.Value); err == nil && arg.Kind == token.STRING {
						out.names[v] = true
						if d := args[len(args)-1] + 1; a == i && d < len(call.Args) {
							if lit, ok := call.Args[d].(*ast.BasicLit); ok {
								val := lit.Value
								if u, err := strconv.Unquote(val); err == nil {
									val = u
								}
								out.defaults[v] = append(out.defaults[v], val)
							}
						}
					}
				case *ast.Ident:
					out.refs[arg.Name] = true
				case *ast.SelectorExpr:
					out.refs[arg.Sel.Name] = true
				}
			}
			return true
		})
	}
	return out
}

// programFlags is, per program of programs, every flag the packages of
// this repository it links define (its subcommands' included), and
// kubectl-netdra's flags from its command tree itself (cobra, with
// kubectl's kubeconfig flags).
func programFlags(t *testing.T, root string) map[string]map[string]bool {
	t.Helper()
	flags, _ := programFlagsAndDefaults(t, root)
	return flags
}

// programFlagsAndDefaults is programFlags, and per program the literal
// defaults of its flags (kubectl-netdra's aside).
func programFlagsAndDefaults(t *testing.T, root string) (map[string]map[string]bool, map[string]map[string][]string) {
	t.Helper()
	byModule := map[string][]string{}
	for _, p := range programs {
		byModule[p[0]] = append(byModule[p[0]], p[1])
	}
	read := map[string]dirFlags{}
	linked := map[string]map[string]bool{} // module, main package: its folders
	for mod, mains := range byModule {
		cmd := exec.Command("go", append([]string{"list", "-f", `{{.ImportPath}} {{.Module.Path}} {{.Module.Dir}} {{join .Deps " "}}`}, mains...)...)
		cmd.Dir = filepath.Join(root, mod)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", mod, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			pkg, modPath, modDir := f[0], f[1], f[2]
			dirs := map[string]bool{}
			for _, dep := range append([]string{pkg}, f[3:]...) {
				rel, ok := strings.CutPrefix(dep, modPath)
				if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
					continue
				}
				dirs[filepath.Join(modDir, rel)] = true
			}
			linked[mod+" ./"+strings.TrimPrefix(pkg, modPath+"/")] = dirs
		}
	}
	out := map[string]map[string]bool{}
	defaults := map[string]map[string][]string{}
	for name, p := range programs {
		dirs := linked[p[0]+" "+p[1]]
		if dirs == nil {
			t.Fatalf("go list gave no packages for %s (%s in %s)", name, p[1], p[0])
		}
		set, consts, refs := map[string]bool{}, map[string]string{}, map[string]bool{}
		for dir := range dirs {
			if _, ok := read[dir]; !ok {
				read[dir] = readDirFlags(t, dir)
			}
			for f := range read[dir].names {
				set[f] = true
			}
			for f, ds := range read[dir].defaults {
				if defaults[name] == nil {
					defaults[name] = map[string][]string{}
				}
				defaults[name][f] = append(defaults[name][f], ds...)
			}
			for r := range read[dir].refs {
				refs[r] = true
			}
			for k, v := range read[dir].consts {
				consts[k] = v
			}
		}
		for r := range refs {
			if v, ok := consts[r]; ok {
				set[v] = true
			}
		}
		out[name] = set
	}
	cli := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) {
			cli[f.Name] = true
			if f.Shorthand != "" {
				cli[f.Shorthand] = true
			}
		}
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(command.New("kubectl-netdra", io.Discard, io.Discard))
	out["kubectl-netdra"] = cli
	return out, defaults
}

// flagWord matches a word that is a flag, -name or --name, with its value
// after = or not.
var flagWord = regexp.MustCompile(`^--?([a-z][a-z0-9-]*)(=.*)?$`)

// commandSep splits a shell line into its commands (and kubectl exec's
// command after its --).
var commandSep = regexp.MustCompile(`\|\||&&|[|;(]|\$\(| -- `)

// TestDocsNameFlagsThatExist checks every flag the documentation gives
// against the flags of the program it is given to: in a command of a code
// block or code span that runs a netdra program (state, dra, netdra-hook,
// kubectl netdra, benchreport, ...: programs), each flag after it is one
// that program defines; a flag in a code span of its own is one the
// program named just before it defines (dra's `-netns-hook`), or, with no
// program named, one some netdra program defines. A program's flags are
// those the packages it links define (go list of its dependencies, their
// flag calls), kubectl-netdra's its cobra command tree's. So a renamed or
// removed flag, or one given to the wrong program, cannot stay documented.
func TestDocsNameFlagsThatExist(t *testing.T) {
	root := moduleRoot(t)
	flags := programFlags(t, root)
	if !flags["state"]["allowed-uids"] || !flags["kubectl-netdra"]["socket-dir"] || !flags["testworld"]["component-qps"] {
		t.Fatalf("the programs' flags miss ones they have (state: %d, kubectl-netdra: %d, testworld: %d): their code has moved",
			len(flags["state"]), len(flags["kubectl-netdra"]), len(flags["testworld"]))
	}
	anyProg := map[string]bool{}
	for _, set := range flags {
		for f := range set {
			anyProg[f] = true
		}
	}
	owner := regexp.MustCompile(`([a-z][a-z0-9-]*)'s (?:own )?$`)
	commands, alone := 0, 0
	for _, d := range docs(t, root) {
		for _, c := range codeText(d.text) {
			text, _, _ := strings.Cut(c.text, " #")
			for _, seg := range commandSep.Split(text, -1) {
				words := strings.Fields(seg)
				for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
					words = words[1:] // VAR=value before the command
				}
				if len(words) == 0 {
					continue
				}
				prog := filepath.Base(words[0])
				if prog == "kubectl" && len(words) > 1 && words[1] == "netdra" {
					prog, words = "kubectl-netdra", words[1:]
				}
				set, ok := flags[prog]
				if !ok {
					continue
				}
				commands++
				for _, w := range words[1:] {
					if m := flagWord.FindStringSubmatch(w); m != nil && !set[m[1]] {
						t.Errorf("%s:%d: `%s`: %s has no flag -%s", d.rel, c.line, strings.TrimSpace(seg), prog, m[1])
					}
				}
			}
		}
		for i, line := range strings.Split(prose(d.text), "\n") {
			for _, loc := range codeSpan.FindAllStringIndex(line, -1) {
				span := strings.Trim(line[loc[0]:loc[1]], "`")
				if !strings.HasPrefix(span, "-") {
					continue
				}
				o := owner.FindStringSubmatch(line[:loc[0]])
				for _, word := range strings.Fields(span) {
					w := flagWord.FindStringSubmatch(word)
					if w == nil {
						continue
					}
					alone++
					if o != nil && flags[o[1]] != nil {
						if !flags[o[1]][w[1]] {
							t.Errorf("%s:%d: %s's `%s`: %s has no flag -%s", d.rel, i+1, o[1], span, o[1], w[1])
						}
						continue
					}
					if otherFlags[w[1]] == "" && !anyProg[w[1]] {
						t.Errorf("%s:%d: `%s`: no netdra program defines the flag -%s", d.rel, i+1, span, w[1])
					}
				}
			}
		}
	}
	if commands == 0 || alone == 0 {
		t.Fatalf("found %d commands of netdra programs and %d flags alone in the documentation: the patterns have drifted", commands, alone)
	}
	t.Logf("checked %d commands of netdra programs and %d flags in code spans of their own", commands, alone)
}
