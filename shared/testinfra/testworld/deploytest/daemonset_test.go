package deploytest

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// nodeProcesses are netdra's node processes, each in its container of the
// node pod (named after it, running its image) with a gRPC socket and a
// metrics port.
var nodeProcesses = []string{"provisioner", "state", "dra", "nri"}

// holder is the container of dra's socket holder (dra sockets): dra's
// image, no gRPC and no metrics, alone in the netdra-sockets DaemonSet.
const holder = "dra-sockets"

// nodeContainers are the node pod's containers: one per process.
var nodeContainers = nodeProcesses

// nodeSets are netdra's two DaemonSets on every node: netdra-node (the
// processes) and netdra-sockets (the holder of dra's kubelet sockets).
type nodeSets struct{ node, holder *appsv1.DaemonSet }

// provisionerCaps are the only capabilities any netdra container adds.
var provisionerCaps = []corev1.Capability{"BPF", "NET_ADMIN", "SYS_ADMIN"}

// hostPathOwners says which containers may mount a host path, by prefix.
// A host path matching no prefix is a violation: a new one needs a rule.
var hostPathOwners = []struct {
	prefix     string
	containers []string
}{
	// dra's own; the holder's are checked by holderRules.
	{"/var/lib/kubelet/", []string{"dra", holder}},
	// The holder's handover socket, which dra takes the kubelet sockets
	// from.
	{"/run/netdra-holder", []string{"dra", holder}},
	{"/var/run/cdi", []string{"dra"}},
	{"/var/run/nri", []string{"nri"}},
	{"/run/nri", []string{"nri"}},
	{"/sys", []string{"provisioner"}},
	{"/var/run/netns", []string{"provisioner"}},
	{"/run/netns", []string{"provisioner"}},
	{"/var/lib/netdra", []string{"state", "state-dir"}},
	// netdra-hook (the netns check and gate hooks), installed on the host
	// for runc to run.
	{"/opt/netdra/bin", []string{"netns-hook"}},
	// nri's gate socket, which the hooks runc runs on the host call.
	{"/run/netdra-gate", []string{"nri"}},
	// The take-over locks (-take-over-lock), by which a roll's next node
	// pod waits for the previous one's processes.
	{"/run/netdra-lock", []string{"provisioner", "dra", "nri"}},
}

// podRules lists what is wrong with the node DaemonSets' pod specs.
func podRules(s nodeSets) []string {
	bad := setRules(s.node, nodeContainers)
	bad = append(bad, setRules(s.holder, []string{holder})...)
	for _, c := range s.node.Spec.Template.Spec.Containers {
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/run/netdra" }) {
			bad = append(bad, c.Name+": does not mount the shared socket directory /run/netdra")
		}
	}
	bad = append(bad, hookRules(s.node.Spec.Template.Spec)...)
	return append(bad, holderRules(s)...)
}

// setRules lists what is wrong with one DaemonSet's pod spec, whose
// containers must be those named.
func setRules(ds *appsv1.DaemonSet, containers []string) []string {
	var bad []string
	spec := ds.Spec.Template.Spec
	var names []string
	for _, c := range spec.Containers {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, containers) {
		bad = append(bad, fmt.Sprintf("%s: containers %v, want %v", ds.Name, names, containers))
	}
	if spec.PriorityClassName != "system-node-critical" {
		bad = append(bad, fmt.Sprintf("%s: priorityClassName %q", ds.Name, spec.PriorityClassName))
	}
	if !slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool {
		return t.Key == "" && t.Operator == corev1.TolerationOpExists && t.Effect == ""
	}) {
		bad = append(bad, fmt.Sprintf("%s: no toleration of every taint (operator Exists, no key, no effect): %v", ds.Name, spec.Tolerations))
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		bad = append(bad, ds.Name+": the ServiceAccount token is mounted into every container")
	}
	for _, c := range spec.Containers {
		bad = append(bad, probeRules(c)...)
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() ||
			c.Resources.Limits.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
			bad = append(bad, c.Name+": cpu and memory requests and limits must all be set")
		}
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		bad = append(bad, imageRules(c)...)
		bad = append(bad, privilegeRules(c)...)
		bad = append(bad, mountRules(c, spec.Volumes)...)
	}
	return bad
}

// hookRules: the netns-hook init container installs netdra-hook (nri
// install-hook, from nri's image) into its hostPath, and dra's
// -netns-hook and nri's -gate-hook name the file it installs: a hook path
// that names nothing fails every container of a claim. dra's -gate-socket
// is nri's: a hook that asks another socket refuses every container.
func hookRules(spec corev1.PodSpec) []string {
	i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == "netns-hook" })
	if i < 0 {
		return []string{"no netns-hook init container"}
	}
	cmd := spec.InitContainers[i].Command
	if len(cmd) != 3 || cmd[0] != "/usr/local/bin/nri" || cmd[1] != "install-hook" || path.Base(cmd[2]) != "netdra-hook" {
		return []string{fmt.Sprintf("netns-hook: command %q, want /usr/local/bin/nri install-hook <dir>/netdra-hook", cmd)}
	}
	var bad []string
	for _, want := range [][2]string{{"dra", "-netns-hook="}, {"nri", "-gate-hook="}} {
		c := spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == want[0] })]
		if !slices.Contains(c.Args, want[1]+cmd[2]) {
			bad = append(bad, fmt.Sprintf("%s: no %s%s, the hook netns-hook installs (args %q)", want[0], want[1], cmd[2], c.Args))
		}
	}
	gateSocket := func(name string) string {
		c := spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name })]
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "-gate-socket="); ok {
				return v
			}
		}
		return ""
	}
	if dra, nri := gateSocket("dra"), gateSocket("nri"); dra == "" || dra != nri {
		bad = append(bad, fmt.Sprintf("dra: -gate-socket=%s, want nri's, %s", dra, nri))
	}
	return bad
}

// holderRules: the holder of dra's kubelet sockets runs `dra sockets` from
// dra's very image, serves the handover socket dra's -keep-sockets names
// (else dra waits for a holder that is not there and never registers) in
// the host directory dra mounts at the same path, mounts the kubelet
// directories dra mounts at the same paths (the sockets it creates are
// dra's, where the kubelet looks for them) and no other host path, serves
// no port, and is not rolled by an upgrade (OnDelete: a roll of the
// holder deregisters the driver, which is what it is there to avoid).
func holderRules(s nodeSets) []string {
	byName := func(spec corev1.PodSpec, name string) *corev1.Container {
		i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name })
		if i < 0 {
			return nil
		}
		return &spec.Containers[i]
	}
	hspec, nspec := s.holder.Spec.Template.Spec, s.node.Spec.Template.Spec
	h, dra := byName(hspec, holder), byName(nspec, "dra")
	if h == nil || dra == nil {
		return []string{fmt.Sprintf("no %s or dra container", holder)}
	}
	var bad []string
	if t := s.holder.Spec.UpdateStrategy.Type; t != appsv1.OnDeleteDaemonSetStrategyType {
		bad = append(bad, fmt.Sprintf("%s: updateStrategy %q, want OnDelete (an upgrade leaves the holder running)", s.holder.Name, t))
	}
	if h.Image != dra.Image {
		bad = append(bad, fmt.Sprintf("%s: image %s, want dra's, %s", holder, h.Image, dra.Image))
	}
	if len(h.Args) == 0 || h.Args[0] != "sockets" {
		bad = append(bad, fmt.Sprintf("%s: args %q, want dra's sockets subcommand first", holder, h.Args))
	}
	var handover, keep string
	for _, a := range h.Args {
		if v, ok := strings.CutPrefix(a, "-socket="); ok {
			handover = v
		}
	}
	for _, a := range dra.Args {
		if v, ok := strings.CutPrefix(a, "-keep-sockets="); ok {
			keep = v
		}
	}
	if keep == "" || keep != handover {
		bad = append(bad, fmt.Sprintf("dra: -keep-sockets=%s, want the handover socket %s serves, %s", keep, holder, handover))
	}
	// hostMounts are c's host path mounts ("<host path> at <mount path>")
	// whose host path contains any of within.
	hostMounts := func(spec corev1.PodSpec, c *corev1.Container, within ...string) []string {
		var out []string
		for _, m := range c.VolumeMounts {
			i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
			if i < 0 || spec.Volumes[i].HostPath == nil {
				continue
			}
			if p := spec.Volumes[i].HostPath.Path; slices.ContainsFunc(within, func(w string) bool { return strings.Contains(p, w) }) {
				out = append(out, p+" at "+m.MountPath)
			}
		}
		slices.Sort(out)
		return out
	}
	if got, want := hostMounts(hspec, h, "/kubelet/"), hostMounts(nspec, dra, "/kubelet/"); len(want) == 0 || !slices.Equal(got, want) {
		bad = append(bad, fmt.Sprintf("%s: mounts the kubelet directories %q, want dra's, %q", holder, got, want))
	}
	dir := path.Dir(handover)
	inDir := func(spec corev1.PodSpec, c *corev1.Container) string {
		for _, m := range hostMounts(spec, c, "/") {
			if strings.HasSuffix(m, " at "+dir) {
				return m
			}
		}
		return ""
	}
	if got, want := inDir(hspec, h), inDir(nspec, dra); got == "" || got != want {
		bad = append(bad, fmt.Sprintf("%s: the handover directory %s is host path %q, dra's is %q: want one host directory", holder, dir, got, want))
	}
	if len(h.Ports) > 0 {
		bad = append(bad, fmt.Sprintf("%s: ports %v, want none", holder, h.Ports))
	}
	return bad
}

// imageRules: every container, init containers too, runs one of netdra's
// own images (make images builds them, make images-load imports them): an
// image from elsewhere (busybox for a chmod) is one more image a user must
// mirror, and on a node with netdra's images only it never starts.
func imageRules(c corev1.Container) []string {
	ref, _, _ := strings.Cut(c.Image, "@") // the digest, if any
	repo, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo, tag = ref[:i], ref[i+1:]
	}
	svc := repo[strings.LastIndex(repo, "/")+1:]
	if !slices.Contains(append(slices.Clone(nodeProcesses), "operator"), svc) || !strings.Contains(repo, "netdra") {
		return []string{fmt.Sprintf("%s: image %s is not one of netdra's", c.Name, c.Image)}
	}
	// A release's tag: no tag or latest would follow whatever was pushed
	// last, and make the kubelet pull each time.
	if tag == "" || tag == "latest" {
		return []string{fmt.Sprintf("%s: image %s has no release tag", c.Name, c.Image)}
	}
	return nil
}

// privilegeRules: only the provisioner holds capabilities (exactly its
// three) and is privileged (its netns pins' Bidirectional mount needs it),
// nothing else can escalate, everything else drops every capability,
// state runs as non-root.
func privilegeRules(c corev1.Container) []string {
	sc := c.SecurityContext
	if sc == nil {
		return []string{c.Name + ": no securityContext"}
	}
	var bad []string
	privileged := sc.Privileged != nil && *sc.Privileged
	switch {
	case c.Name == "provisioner" && !privileged:
		bad = append(bad, "provisioner: not privileged (its netns pins are mounted Bidirectional)")
	case c.Name != "provisioner" && privileged:
		bad = append(bad, c.Name+": privileged")
	}
	if c.Name != "provisioner" && (sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation) {
		bad = append(bad, c.Name+": allowPrivilegeEscalation is not false")
	}
	var add, drop []corev1.Capability
	if sc.Capabilities != nil {
		add, drop = sc.Capabilities.Add, sc.Capabilities.Drop
	}
	if !slices.Contains(drop, "ALL") {
		bad = append(bad, c.Name+": does not drop ALL capabilities")
	}
	want := []corev1.Capability(nil)
	if c.Name == "provisioner" {
		want = provisionerCaps
	}
	if got := slices.Sorted(slices.Values(add)); !slices.Equal(got, want) {
		bad = append(bad, fmt.Sprintf("%s: adds capabilities %v, want %v", c.Name, got, want))
	}
	if c.Name == "state" && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0) {
		bad = append(bad, "state: not run as a non-root uid")
	}
	return bad
}

// mountRules: host paths only where hostPathOwners allows them, the
// ServiceAccount token in dra only.
func mountRules(c corev1.Container, volumes []corev1.Volume) []string {
	var bad []string
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			bad = append(bad, fmt.Sprintf("%s: mounts unknown volume %s", c.Name, m.Name))
			continue
		}
		v := volumes[i]
		if v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool {
			return s.ServiceAccountToken != nil
		}) && c.Name != "dra" {
			bad = append(bad, c.Name+": mounts a ServiceAccount token")
		}
		if v.HostPath == nil {
			continue
		}
		p := v.HostPath.Path
		bad = append(bad, propagationRules(c.Name, m, p)...)
		j := slices.IndexFunc(hostPathOwners, func(o struct {
			prefix     string
			containers []string
		}) bool {
			return p == strings.TrimSuffix(o.prefix, "/") || strings.HasPrefix(p, strings.TrimSuffix(o.prefix, "/")+"/")
		})
		switch {
		case j < 0:
			bad = append(bad, fmt.Sprintf("%s: mounts host path %s, which no rule allows", c.Name, p))
		case !slices.Contains(hostPathOwners[j].containers, c.Name):
			bad = append(bad, fmt.Sprintf("%s: mounts host path %s, which only %v may", c.Name, p, hostPathOwners[j].containers))
		}
	}
	return bad
}

// propagatedPaths are the host paths a container may mount with
// HostToContainer: the container runtime refuses it (the container is never
// created) unless the host's mount there is shared or slave, which only
// the netns directory is wherever pods run (ip netns and the runtimes make
// it a shared mount). Elsewhere a host without systemd, or a bpffs mounted
// by hand, has private mounts.
// The provisioner's netns pins are in a folder of it (Bidirectional).
var propagatedPaths = []string{"/var/run/netns", "/run/netns", "/var/run/netns/netdra"}

// propagationRules: mount propagation only on propagatedPaths.
func propagationRules(container string, m corev1.VolumeMount, hostPath string) []string {
	if m.MountPropagation == nil || *m.MountPropagation == corev1.MountPropagationNone || slices.Contains(propagatedPaths, hostPath) {
		return nil
	}
	return []string{fmt.Sprintf("%s: mounts host path %s with propagation %s, which needs a shared or slave mount there on the host",
		container, hostPath, *m.MountPropagation)}
}

// probeRules: liveness and readiness probes run the container's own
// binary's health subcommand against the socket it serves: a process's
// `<name> health`, the holder's `dra sockets health`.
func probeRules(c corev1.Container) []string {
	var socket string
	for _, a := range c.Args {
		if s, ok := strings.CutPrefix(a, "-socket="); ok {
			socket = s
		}
	}
	if socket == "" {
		return []string{c.Name + ": no -socket argument"}
	}
	want := []string{"/usr/local/bin/" + c.Name, "health", "-socket=" + socket}
	if c.Name == holder {
		want = []string{"/usr/local/bin/dra", "sockets", "health", "-socket=" + socket}
	}
	var bad []string
	for kind, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.Exec == nil {
			bad = append(bad, fmt.Sprintf("%s: no exec %s probe", c.Name, kind))
			continue
		}
		if !slices.Equal(p.Exec.Command, want) {
			bad = append(bad, fmt.Sprintf("%s: %s probe runs %q, want %q", c.Name, kind, p.Exec.Command, want))
		}
	}
	return bad
}

// TestDaemonSet_Privileges reads the rendered node DaemonSet of the base
// and the dev overlay (whose containers all run dev images): only the provisioner has capabilities (NET_ADMIN,
// SYS_ADMIN and BPF) and the host's /sys and netns directory; only dra mounts
// kubelet directories and a ServiceAccount token; only nri the NRI socket;
// every container has allowPrivilegeEscalation false, drops ALL,
// resources, and exec probes through its health subcommand; the pod is
// system-node-critical and tolerates every taint. In the base every
// container also has a read-only root filesystem (the dev overlay lifts it
// for Tilt's live update of the long-running containers, the processes'
// and the holder's, and nothing else; init containers keep it). Both node
// DaemonSets are read: netdra-node and netdra-sockets.
func TestDaemonSet_Privileges(t *testing.T) {
	for _, dir := range []string{base, dev} {
		t.Run(dir, func(t *testing.T) {
			sets := nodeDaemonSets(t, dir)
			for _, v := range podRules(sets) {
				t.Error(v)
			}
			for _, ds := range []*appsv1.DaemonSet{sets.node, sets.holder} {
				readOnlyRules(t, dir, ds)
			}
		})
	}
}

// readOnlyRules: in the base every container has a read-only root
// filesystem; in the dev overlay only the init containers do, and every
// container runs a dev image.
func readOnlyRules(t *testing.T, dir string, ds *appsv1.DaemonSet) {
	t.Helper()
	inits := len(ds.Spec.Template.Spec.InitContainers)
	for i, c := range append(slices.Clone(ds.Spec.Template.Spec.InitContainers), ds.Spec.Template.Spec.Containers...) {
		ro := c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem
		if want := dir == base || i < inits; ro != want { // live update syncs into the long-running containers only
			t.Errorf("%s: readOnlyRootFilesystem %v, want %v", c.Name, ro, want)
		}
		// The dev overlay's images block names the base's images:
		// every container runs a dev image Tilt builds.
		if dir == dev && (!strings.HasPrefix(c.Image, "netdra-dev/") || !strings.HasSuffix(c.Image, ":dev")) {
			t.Errorf("%s: image %s, not a dev image (netdra-dev/<service>:dev)", c.Name, c.Image)
		}
	}
}

// TestDaemonSet_PrivilegesDetected makes sure each rule bites: a broken
// copy of the base DaemonSet yields the violation named.
func TestDaemonSet_PrivilegesDetected(t *testing.T) {
	byName := func(s nodeSets, name string) *corev1.Container {
		for _, ds := range []*appsv1.DaemonSet{s.node, s.holder} {
			for i := range ds.Spec.Template.Spec.Containers {
				if ds.Spec.Template.Spec.Containers[i].Name == name {
					return &ds.Spec.Template.Spec.Containers[i]
				}
			}
		}
		t.Fatalf("no container %s", name)
		return nil
	}
	tests := []struct {
		name   string
		mutate func(s nodeSets)
		want   string
	}{
		{"state gets a capability", func(s nodeSets) {
			byName(s, "state").SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, "state: adds capabilities [NET_ADMIN]"},
		{"nri privileged", func(s nodeSets) {
			p := true
			byName(s, "nri").SecurityContext.Privileged = &p
		}, "nri: privileged"},
		{"provisioner not privileged", func(s nodeSets) {
			p := false
			byName(s, "provisioner").SecurityContext.Privileged = &p
		}, "provisioner: not privileged"},
		{"provisioner gets one more", func(s nodeSets) {
			c := byName(s, "provisioner")
			c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, "SYS_PTRACE")
		}, "provisioner: adds capabilities"},
		{"nri mounts kubelet plugins", func(s nodeSets) {
			c := byName(s, "nri")
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "kubelet-registry", MountPath: "/x"})
		}, "nri: mounts host path /var/lib/kubelet/plugins_registry, which only [dra dra-sockets] may"},
		{"the holder mounts the CDI directory", func(s nodeSets) {
			s.holder.Spec.Template.Spec.Volumes = append(s.holder.Spec.Template.Spec.Volumes, corev1.Volume{Name: "cdi-specs",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/cdi"}}})
			c := byName(s, holder)
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "cdi-specs", MountPath: "/var/run/cdi"})
		}, "dra-sockets: mounts host path /var/run/cdi, which only [dra] may"},
		{"the holder without the registration directory", func(s nodeSets) {
			c := byName(s, holder)
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "kubelet-registry" })
		}, "dra-sockets: mounts the kubelet directories"},
		{"the holder's registration directory elsewhere", func(s nodeSets) {
			c := byName(s, holder)
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].Name == "kubelet-registry" {
					c.VolumeMounts[i].MountPath = "/registry"
				}
			}
		}, "dra-sockets: mounts the kubelet directories"},
		{"the holder gets a capability", func(s nodeSets) {
			byName(s, holder).SecurityContext.Capabilities.Add = []corev1.Capability{"DAC_OVERRIDE"}
		}, "dra-sockets: adds capabilities [DAC_OVERRIDE]"},
		{"dra without the holder", func(s nodeSets) {
			c := byName(s, "dra")
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "-keep-sockets=") })
		}, "dra: -keep-sockets=, want the handover socket dra-sockets serves"},
		{"the holder rolled by upgrades", func(s nodeSets) {
			s.holder.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}
		}, `netdra-sockets: updateStrategy "RollingUpdate", want OnDelete`},
		{"the handover in another host directory", func(s nodeSets) {
			for i, v := range s.holder.Spec.Template.Spec.Volumes {
				if v.Name == "sockets-holder" {
					s.holder.Spec.Template.Spec.Volumes[i].HostPath.Path = "/run/elsewhere"
				}
			}
		}, "dra-sockets: the handover directory /run/netdra-holder is host path"},
		{"the holder on another image", func(s nodeSets) {
			byName(s, holder).Image = "ghcr.io/netdra/nri:0.2.0-dev"
		}, "dra-sockets: image ghcr.io/netdra/nri:0.2.0-dev, want dra's"},
		{"the holder's probe asks dra", func(s nodeSets) {
			byName(s, holder).ReadinessProbe.Exec.Command = []string{"/usr/local/bin/dra", "health", "-socket=/run/netdra/dra-sockets.sock"}
		}, "dra-sockets: readiness probe runs"},
		{"dra mounts the NRI socket", func(s nodeSets) {
			c := byName(s, "dra")
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "nri", MountPath: "/var/run/nri"})
		}, "dra: mounts host path /var/run/nri, which only [nri] may"},
		{"an unknown host path", func(s nodeSets) {
			s.node.Spec.Template.Spec.Volumes = append(s.node.Spec.Template.Spec.Volumes, corev1.Volume{Name: "etc",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}})
			c := byName(s, "state")
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "etc", MountPath: "/etc/host"})
		}, "state: mounts host path /etc, which no rule allows"},
		{"escalation allowed", func(s nodeSets) {
			e := true
			byName(s, "dra").SecurityContext.AllowPrivilegeEscalation = &e
		}, "dra: allowPrivilegeEscalation is not false"},
		{"token everywhere", func(s nodeSets) {
			s.node.Spec.Template.Spec.AutomountServiceAccountToken = nil
		}, "the ServiceAccount token is mounted into every container"},
		{"token in nri", func(s nodeSets) {
			c := byName(s, "nri")
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "dra-token", MountPath: "/t"})
		}, "nri: mounts a ServiceAccount token"},
		{"probe of another binary", func(s nodeSets) {
			byName(s, "state").LivenessProbe.Exec.Command[0] = "/usr/local/bin/dra"
		}, "state: liveness probe runs"},
		{"no limits", func(s nodeSets) {
			byName(s, "provisioner").Resources.Limits = nil
		}, "provisioner: cpu and memory requests and limits must all be set"},
		{"not critical", func(s nodeSets) {
			s.holder.Spec.Template.Spec.PriorityClassName = ""
		}, "priorityClassName"},
		{"some taints only", func(s nodeSets) {
			s.node.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}}
		}, "no toleration of every taint"},
		{"an init container from busybox", func(s nodeSets) {
			s.node.Spec.Template.Spec.InitContainers[0].Image = "busybox:1.37.0"
		}, "state-dir: image busybox:1.37.0 is not one of netdra's"},
		{"bpffs propagated", func(s nodeSets) {
			c := byName(s, "provisioner")
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].Name == "host-bpffs" {
					p := corev1.MountPropagationHostToContainer
					c.VolumeMounts[i].MountPropagation = &p
				}
			}
		}, "provisioner: mounts host path /sys/fs/bpf with propagation HostToContainer"},
		{"the gate hook at the old nri binary", func(s nodeSets) {
			c := byName(s, "nri")
			for i, a := range c.Args {
				if strings.HasPrefix(a, "-gate-hook=") {
					c.Args[i] = "-gate-hook=/opt/netdra/bin/nri"
				}
			}
		}, "nri: no -gate-hook=/opt/netdra/bin/netdra-hook"},
		{"dra asks another gate socket", func(s nodeSets) {
			c := byName(s, "dra")
			for i, a := range c.Args {
				if strings.HasPrefix(a, "-gate-socket=") {
					c.Args[i] = "-gate-socket=/run/netdra/nri-gate.sock"
				}
			}
		}, "dra: -gate-socket=/run/netdra/nri-gate.sock, want nri's, /run/netdra-gate/nri.sock"},
		{"state as root", func(s nodeSets) {
			var root int64
			byName(s, "state").SecurityContext.RunAsUser = &root
		}, "state: not run as a non-root uid"},
	}
	good := nodeDaemonSets(t, base)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := nodeSets{node: good.node.DeepCopy(), holder: good.holder.DeepCopy()}
			tt.mutate(s)
			got := podRules(s)
			if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, tt.want) }) {
				t.Errorf("violations %q, want one containing %q", got, tt.want)
			}
		})
	}
}

// TestOperator_Deployment: two replicas taking turns through a Lease,
// non-root, no capabilities, read-only root, resources, probes.
func TestOperator_Deployment(t *testing.T) {
	dep := typed[appsv1.Deployment](t, find(t, render(t, base), "Deployment", "netdra-operator"))
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
	}
	spec := dep.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "-leader-elect=true") {
		t.Errorf("args %q: no -leader-elect=true", c.Args)
	}
	if spec.ServiceAccountName != "netdra-operator" {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("the operator does not run as a non-root uid")
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		t.Errorf("securityContext %+v: want no escalation, read-only root, ALL dropped, none added", sc)
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("no memory request or limit")
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("no liveness or readiness probe")
	}
}
