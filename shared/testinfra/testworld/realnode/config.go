package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
)

// containerdConfig is containerd 2.4's configuration (version 4) for one
// node: CRI and NRI on, every path under the node's directory, runc from
// Debian with cgroupfs, the pause image pinned as the sandbox image, CDI
// specs read from the node's cdi directory. Pitfalls: in version 4 the
// socket addresses belong in the server plugins' blocks (a top-level
// [grpc] is ignored); restrict_oom_score_adj because the bounding set of
// a test machine may lack CAP_SYS_RESOURCE (runc fails with "can't get
// final child's PID from pipe" otherwise); no AppArmor. NRI's default
// validator is on, so that a pod annotated
// required-plugins.noderesource.dev/pod: '["netdra"]' gets no container
// started while netdra's nri plugin is not connected (RequiredPlugins).
const containerdConfig = `version = 4
root = '{{dir}}/containerd/root'
state = '{{dir}}/containerd/state'

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = '{{dir}}/containerd.sock'
  [plugins.'io.containerd.server.v1.ttrpc']
    address = '{{dir}}/containerd.sock.ttrpc'
  [plugins.'io.containerd.server.v1.debug']
    address = ''
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{{pause}}'
  [plugins.'io.containerd.cri.v1.runtime']
    disable_apparmor = true
    restrict_oom_score_adj = true
    enable_cdi = true
    cdi_spec_dirs = ['{{dir}}/cdi']
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{{runc}}'
          Root = '{{dir}}/containerd/runc'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{{cni}}']
      conf_dir = '{{dir}}/cni/net.d'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
  [plugins.'io.containerd.internal.v1.opt']
    path = '{{dir}}/containerd/opt'
  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = '{{dir}}/nri/nri.sock'
    plugin_path = '{{dir}}/nri/plugins'
    plugin_config_path = '{{dir}}/nri/conf.d'
    [plugins.'io.containerd.nri.v1.nri'.default_validator]
      enable = true
`

// kubeletConfig is the KubeletConfiguration: cgroupfs on this machine's
// cgroup v1 hierarchy (failCgroupV1: false), no QoS cgroups and no
// allocatable enforcement, pod logs under the node's directory. Its API
// listens on the node's IP, where the apiserver dials it for kubectl exec
// and logs (--kubelet-preferred-address-types=InternalIP), and admits
// what a cluster's kubelet does: clients with a certificate of the
// cluster's CA (the apiserver's) or a token, authorized by the apiserver
// (webhook); its healthz stays on loopback. The DRA health gates are named
// though v1.37 turns them on by default (beta): the kubelet takes the
// drivers' DRAResourceHealth stream into the pods' allocatedResourcesStatus
// (TestE2E_HealthInPodStatus), and the test world keeps doing so if a
// release changes the defaults. The apiserver keeps the field by the same
// gate, on by default too.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://{{crisock}}
imageServiceEndpoint: unix://{{crisock}}
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
address: {{nodeip}}
port: {{port}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {{healthz}}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: {{clientca}}}
authorization:
  mode: Webhook
podLogsDir: {{dir}}/podlogs
resolvConf: /etc/resolv.conf
serializeImagePulls: false
localStorageCapacityIsolation: false
evictionHard:
  memory.available: "1Mi"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 10s
syncFrequency: 10s
fileCheckFrequency: 10s
rotateCertificates: false
serverTLSBootstrap: false
maxPods: 110
featureGates:
  ResourceHealthStatus: true
  ResourceHealthStatusMessage: true
`

// cniConfig gives pods an eth0 on a bridge of the node's own, addresses
// from a host-local range kept under the node's directory. The bridge is
// the pods' default gateway (isDefaultGateway: the bridge gets the subnet's first
// address, the pods a default route through it), as on a cluster's node: the kubelet's HTTP probes
// reach a pod, and a pod reaches the apiserver at the kubernetes Service's
// ClusterIP (controlplane.Options.PodAccess) through the host.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "{{bridge}}",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "{{bridge}}",
      "isGateway": true,
      "isDefaultGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "{{subnet}}"}]],
        "dataDir": "{{dir}}/cni/ipam"
      }
    }
  ]
}
`

// clusterCA is the CA file of the kubeconfig's cluster (the kubelet
// admits clients with its certificates); inline CA data is written to
// out.
func clusterCA(kubeconfig, out string) (string, error) {
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return "", fmt.Errorf("the kubelet's kubeconfig: %w", err)
	}
	ctx, ok := kc.Contexts[kc.CurrentContext]
	if !ok || kc.Clusters[ctx.Cluster] == nil {
		return "", fmt.Errorf("kubeconfig %s: no cluster in its current context %q", kubeconfig, kc.CurrentContext)
	}
	c := kc.Clusters[ctx.Cluster]
	if c.CertificateAuthority != "" {
		return c.CertificateAuthority, nil
	}
	if len(c.CertificateAuthorityData) == 0 {
		return "", fmt.Errorf("kubeconfig %s: its cluster has no CA", kubeconfig)
	}
	if err := os.WriteFile(out, c.CertificateAuthorityData, 0o644); err != nil {
		return "", fmt.Errorf("the cluster's CA for the kubelet: %w", err)
	}
	return out, nil
}

// render replaces each {{key}} in tmpl and writes the result to path.
func render(path, tmpl string, vars map[string]string) error {
	var args []string
	for k, v := range vars {
		args = append(args, "{{"+k+"}}", v)
	}
	out := strings.NewReplacer(args...).Replace(tmpl)
	if strings.Contains(out, "{{") {
		return fmt.Errorf("%s: a placeholder has no value", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// crioConfig is CRI-O 1.34's configuration for one node, the equivalent
// of containerdConfig: every path CRI-O keeps under the node's directory
// (storage, its sockets, exit files, version files), pod network
// namespaces pinned under /var/run/netns as containerd's are, runc (through
// runcclamp, CRI-O's stand-in for restrict_oom_score_adj) with conmon from
// Debian and cgroupfs, the pause image pinned, CDI specs read from the
// node's cdi directory, NRI's socket and plugin folders in the node's
// directory but NRI itself off (enable_nri = false, as a crio.conf that
// turns it off has it: CRI-O 1.34's own default is on), no host port
// mapping (no pod asks for one; CRI-O refuses to start without iptables or
// nft otherwise), no irqbalance file touched. NRI is turned on by the
// drop-in docs/install.md tells an operator to write, taken from its text
// (crioNRIDropIn) into the node's crio.conf.d: a node whose pods get
// their devices is the proof that the documented drop-in works. CRI-O
// 1.34 has no NRI validator (its NRI is v0.9, validation came with NRI
// v0.10): a pod's required-plugins annotation is not read; netdra's CDI
// hook is what refuses a container whose device nri did not attach.
const crioConfig = `[crio]
root = '{{dir}}/crio/root'
runroot = '{{dir}}/crio/run'
storage_driver = 'overlay'
log_dir = '{{dir}}/crio/logs'
version_file = '{{dir}}/crio/run/version'
version_file_persist = '{{dir}}/crio/root/version'
clean_shutdown_file = '{{dir}}/crio/root/clean.shutdown'

[crio.api]
listen = '{{dir}}/crio.sock'
stream_address = '127.0.0.1'
stream_port = '0'

[crio.runtime]
default_runtime = 'runc'
cgroup_manager = 'cgroupfs'
conmon_cgroup = 'pod'
hooks_dir = ['{{dir}}/crio/hooks.d']
pinns_path = '{{pinns}}'
container_exits_dir = '{{dir}}/crio/run/exits'
container_attach_socket_dir = '{{dir}}/crio/run/attach'
cdi_spec_dirs = ['{{dir}}/cdi']
decryption_keys_path = '{{dir}}/crio/keys'
irqbalance_config_file = ''
irqbalance_config_restore_file = ''
disable_hostport_mapping = true
default_mounts_file = ''
log_level = 'info'

[crio.runtime.runtimes.runc]
runtime_path = '{{runcclamp}}'
runtime_type = 'oci'
runtime_root = '{{dir}}/crio/runc'
monitor_path = '{{conmon}}'
monitor_cgroup = 'pod'
monitor_env = ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'REALNODE_RUNC={{runc}}']

[crio.image]
pause_image = '{{pause}}'
pause_command = '/pause'
pinned_images = ['{{pause}}']
signature_policy = '{{dir}}/crio/policy.json'

[crio.network]
network_dir = '{{dir}}/cni/net.d'
plugin_dirs = ['{{cni}}']

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
nri_listen = '{{dir}}/nri/nri.sock'
nri_plugin_dir = '{{dir}}/nri/plugins'
nri_plugin_config_dir = '{{dir}}/nri/conf.d'
`

// crioPolicy is the image signature policy CRI-O reads: the node's images
// are built here, never pulled, so any is accepted.
const crioPolicy = `{"default": [{"type": "insecureAcceptAnything"}]}
`
