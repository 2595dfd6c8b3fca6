package tiltcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
)

// params are Tilt's parameter names for each stubbed built-in (the ones
// netdra's Tiltfile may use); the first ones without a "?" are required.
var params = map[string][]string{
	"local_resource": {"name", "cmd?", "deps?", "trigger_mode?", "resource_deps?", "ignore?", "auto_init?",
		"serve_cmd?", "cmd_bat?", "serve_cmd_bat?", "allow_parallel?", "links?", "tags?", "env?", "serve_env?",
		"readiness_probe?", "dir?", "serve_dir?", "labels?"},
	"k8s_yaml":  {"yaml", "allow_duplicates?"},
	"kustomize": {"pathToDir", "kustomize_bin?", "flags?"},
	"docker_build": {"ref", "context", "build_args?", "dockerfile?", "dockerfile_contents?", "live_update?",
		"match_in_env_vars?", "ignore?", "only?", "entrypoint?", "target?", "ssh?", "network?", "secret?",
		"extra_tag?", "container_args?", "cache_from?", "pull?", "platform?", "extra_hosts?"},
	"custom_build": {"ref", "command", "deps", "tag?", "disable_push?", "skips_local_docker?", "live_update?",
		"match_in_env_vars?", "ignore?", "entrypoint?", "command_bat_val?", "outputs_image_ref_to?",
		"command_bat?", "image_deps?", "env?", "dir?"},
	"k8s_resource": {"workload?", "new_name?", "port_forwards?", "extra_pod_selectors?", "trigger_mode?",
		"resource_deps?", "objects?", "auto_init?", "pod_readiness?", "links?", "labels?", "discovery_strategy?"},
	"sync":               {"local_path", "remote_path"},
	"run":                {"cmd", "trigger?", "echo_off?"},
	"fall_back_on":       {"files"},
	"local":              {"command", "quiet?", "command_bat?", "echo_off?", "env?", "dir?", "stdin?"},
	"allow_k8s_contexts": {"contexts"},
	"update_settings":    {"max_parallel_updates?", "k8s_upsert_timeout_secs?", "suppress_unused_image_warnings?"},
	"watch_file":         {"file_path"},
	// ext://restart_process; its other keyword arguments go to custom_build.
	"custom_build_with_restart": {"ref", "command", "deps", "entrypoint", "live_update", "base_suffix?",
		"restart_file?", "trigger?", "exit_policy?"},
}

// extensions are the Tilt extensions the stubs provide, with their symbols.
var extensions = map[string][]string{
	"ext://restart_process": {"custom_build_with_restart"},
}

// call is one recorded call of a built-in.
type call struct {
	fn   string
	args map[string]starlark.Value
}

func (c call) str(name string) string {
	s, _ := starlark.AsString(c.args[name])
	return s
}

func (c call) strings(name string) []string {
	l, _ := c.args[name].(*starlark.List)
	var out []string
	for i := 0; l != nil && i < l.Len(); i++ {
		s, _ := starlark.AsString(l.Index(i))
		out = append(out, s)
	}
	return out
}

// world is one evaluation: the repository it checks paths against and the
// calls made.
type world struct {
	root    string
	targets map[string]bool // the Makefile's targets
	calls   []call
}

func newWorld(root string) (*world, error) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, err
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z0-9_.-]+):`).FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	return &world{root: root, targets: targets}, nil
}

// exec evaluates src as the Tiltfile, with Tilt's dialect of Starlark.
func (w *world) exec(filename string, src []byte) error {
	pre := starlark.StringDict{
		"TRIGGER_MODE_AUTO":   starlark.MakeInt(0),
		"TRIGGER_MODE_MANUAL": starlark.MakeInt(1),
	}
	for name := range params {
		if name != "custom_build_with_restart" {
			pre[name] = w.builtin(name)
		}
	}
	thread := &starlark.Thread{Name: "Tiltfile", Load: w.load}
	opts := &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true, Recursion: true}
	_, err := starlark.ExecFileOptions(opts, thread, filename, src, pre)
	return err
}

func (w *world) load(_ *starlark.Thread, module string) (starlark.StringDict, error) {
	syms, ok := extensions[module]
	if !ok {
		return nil, fmt.Errorf("load(%q): no stub for this module", module)
	}
	out := starlark.StringDict{}
	for _, s := range syms {
		out[s] = w.builtin(s)
	}
	return out, nil
}

// builtin is the stub of name: it checks the arguments against Tilt's
// parameters and the repository, and records the call.
func (w *world) builtin(name string) *starlark.Builtin {
	return starlark.NewBuiltin(name, func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var extra []starlark.Tuple
		if name == "custom_build_with_restart" {
			kwargs, extra = split(kwargs, params[name])
		}
		names := params[name]
		vals := make([]starlark.Value, len(names))
		pairs := make([]any, 0, 2*len(names))
		for i, n := range names {
			pairs = append(pairs, n, &vals[i])
		}
		if err := starlark.UnpackArgs(name, args, kwargs, pairs...); err != nil {
			return nil, err
		}
		c := call{fn: name, args: map[string]starlark.Value{}}
		for i, n := range names {
			if vals[i] != nil {
				c.args[strings.TrimSuffix(n, "?")] = vals[i]
			}
		}
		if len(extra) > 0 { // passed through to custom_build
			inner := w.builtin("custom_build")
			pass := append([]starlark.Tuple{{starlark.String("ref"), c.args["ref"]}, {starlark.String("command"), c.args["command"]},
				{starlark.String("deps"), c.args["deps"]}}, extra...)
			if _, err := starlark.Call(&starlark.Thread{}, inner, nil, pass); err != nil {
				return nil, err
			}
			w.calls = w.calls[:len(w.calls)-1]
		}
		if err := w.check(c); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		w.calls = append(w.calls, c)
		switch name {
		case "kustomize":
			return starlark.String("kustomize:" + c.str("pathToDir")), nil
		case "sync", "run", "fall_back_on":
			d := starlark.StringDict{}
			for k, v := range c.args {
				d[k] = v
			}
			return starlarkstruct.FromStringDict(starlark.String(name), d), nil
		case "local":
			return starlark.String(""), nil
		}
		return starlark.None, nil
	})
}

// split takes the keyword arguments not in names out of kwargs.
func split(kwargs []starlark.Tuple, names []string) (known, extra []starlark.Tuple) {
	for _, kv := range kwargs {
		k, _ := starlark.AsString(kv[0])
		found := false
		for _, n := range names {
			if strings.TrimSuffix(n, "?") == k {
				found = true
			}
		}
		if found {
			known = append(known, kv)
		} else {
			extra = append(extra, kv)
		}
	}
	return known, extra
}

// check applies the rules a stub can check alone: watched and kustomized
// paths exist (build outputs under _output/ excepted), make targets exist,
// live updates are lists of steps.
func (w *world) check(c call) error {
	for _, p := range c.strings("deps") {
		if err := w.exists(p); err != nil {
			return fmt.Errorf("deps: %w", err)
		}
	}
	switch c.fn {
	case "kustomize":
		if _, err := os.Stat(filepath.Join(w.root, c.str("pathToDir"), "kustomization.yaml")); err != nil {
			return fmt.Errorf("not a kustomization: %w", err)
		}
	case "watch_file":
		return w.exists(c.str("file_path"))
	case "sync":
		return w.exists(c.str("local_path"))
	case "custom_build_with_restart":
		if c.strings("entrypoint") == nil && c.str("entrypoint") == "" {
			return fmt.Errorf("no entrypoint")
		}
		if l, ok := c.args["live_update"].(*starlark.List); !ok || l.Len() == 0 {
			return fmt.Errorf("the restart_process extension needs a non-empty live_update")
		}
	}
	for _, key := range []string{"cmd", "serve_cmd", "command"} {
		if err := w.makeTargets(c.str(key)); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	return nil
}

func (w *world) exists(p string) error {
	if p == "_output" || strings.HasPrefix(p, "_output/") {
		return nil // made by the build
	}
	if _, err := os.Stat(filepath.Join(w.root, p)); err != nil {
		return fmt.Errorf("path %s: %w", p, err)
	}
	return nil
}

var makeCall = regexp.MustCompile(`(?:^|[;&|]\s*)make((?:\s+[a-zA-Z0-9_.-]+(?:=\S*)?)+)`)

// makeTargets checks that every target a `make ...` in cmd names exists.
func (w *world) makeTargets(cmd string) error {
	for _, m := range makeCall.FindAllStringSubmatch(cmd, -1) {
		for _, f := range strings.Fields(m[1]) {
			if strings.Contains(f, "=") {
				continue
			}
			if !w.targets[f] {
				return fmt.Errorf("make target %q is not in the Makefile", f)
			}
		}
	}
	return nil
}

// all returns the recorded calls of fn.
func (w *world) all(fn string) []call {
	var out []call
	for _, c := range w.calls {
		if c.fn == fn {
			out = append(out, c)
		}
	}
	return out
}
