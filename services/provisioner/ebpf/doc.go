// Package ebpf is the provisioner's eBPF: the programs netdra puts on a
// device it hands to a pod, and the hand-off of the programs a host had on
// an interface. It is the only package of netdra that imports cilium/ebpf.
//
// On a device in a pod, two SchedCLS programs written in C (bpf/netdra.c,
// compiled by bpf2go, the object committed) run at tc ingress and egress:
// they count packets and bytes each way, drop egress frames whose source
// MAC is not the device's (spoofChk) and, for software VLAN, push the
// claim's tag on egress and admit on ingress only frames with that tag,
// which they pop. Each device gets its own maps. They are attached with
// tcx links, from a thread inside the pod's network namespace (tcx resolves
// the interface index there). tcx needs Linux 6.6 or later: on an older
// kernel Attach fails (wrapping ebpf.ErrNotSupported) and the device is not
// attached; there is no classic tc fallback yet.
//
// Restart: the provisioner pins what it attaches on a bpffs it mounts
// (-bpffs, /sys/fs/bpf by default). Programs.Root
// (<bpffs>/netdra/net-<inode of the host netns>) holds a directory per
// device with its links (ingress, egress) and maps (stats, policies);
// Handoff.Root (<bpffs>/netdra-handoff/net-<inode>) the programs the host
// had on a host interface. Pinned links keep the programs attached while
// no process holds them, so a provisioner restart (or crash) changes
// nothing on the devices; the new process finds everything by the device
// name, which every request carries: counters continue, Detach and Free
// detach and unpin. Re-attaching from the allocation state instead would
// leave the devices unprotected (no spoof check, no VLAN) from the crash
// until the state service and the provisioner were back, would reset the
// counters, and would need the pod netns of every attached device; pinning
// needs none of that. The bpffs must outlive the provisioner's container:
// in a pod, mount the host's /sys/fs/bpf. A node reboot clears the bpffs
// and the devices alike.
//
// What a killed provisioner leaves: the programs of a device freed before
// they came off stay on its link, held by its pinned links. netdra knows
// its own programs by name and kernel tag, or by a pinned link of its own
// holding them (own.go): the hand-off never takes them for a host's (Take
// detaches them, Give never attaches them), RemoveStrays takes off the
// ones no link holds, and the provisioner's sweep removes the pinned ones
// of the devices without an allocation. Tidy removes the empty
// directories a stop leaves.
package ebpf
