//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// netdra's programs on a device handed to a pod, attached in the pod's
// network namespace (tcx, or classic tc clsact with direct-action on kernels
// without tcx). One collection is loaded per device: its config says what to
// enforce (spoof check, software VLAN) and its stats count what passed and
// what was dropped, by policy. Both programs return TC_ACT_UNSPEC (tcx's
// TCX_NEXT) for what they pass, so other programs and the kernel carry on.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define PASS -1 /* TC_ACT_UNSPEC == TCX_NEXT */
#define DROP 2  /* TC_ACT_SHOT == TCX_DROP */

#define VLAN_VID_MASK 0x0fff

/* Indexes of the stats map. */
enum stat_index {
	STAT_RX = 0,         /* frames the pod received */
	STAT_TX = 1,         /* frames the pod sent */
	STAT_DROP_SPOOF = 2, /* egress frames with another source MAC */
	STAT_DROP_VLAN = 3,  /* ingress frames with another tag or none */
	STAT_MAX = 4,
};

struct stat_value {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct stat_value);
	__uint(max_entries, STAT_MAX);
} stats SEC(".maps");

/* What to enforce on the device; all zero enforces nothing (counters only). */
struct policy {
	__u8 mac[ETH_ALEN]; /* the device's assigned MAC, for the spoof check */
	__u8 spoof_chk;     /* 1: drop egress frames from another source MAC */
	__u8 pad;
	__u16 vlan_tci;   /* VLAN ID | priority << 13, host byte order */
	__u16 vlan_proto; /* ETH_P_8021Q or ETH_P_8021AD; 0: no software VLAN */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct policy);
	__uint(max_entries, 1);
} policies SEC(".maps");

static __always_inline void count(__u32 index, __u32 len)
{
	struct stat_value *v = bpf_map_lookup_elem(&stats, &index);

	if (v) {
		v->packets++;
		v->bytes += len;
	}
}

static __always_inline int drop(__u32 index, __u32 len)
{
	count(index, len);
	return DROP;
}

/* netdra_ingress admits only frames tagged with the configured VLAN and
 * protocol, and pops the tag, when software VLAN is on; it counts what the
 * pod receives. */
SEC("tc")
int netdra_ingress(struct __sk_buff *skb)
{
	__u32 zero = 0, len = skb->len;
	struct policy *c = bpf_map_lookup_elem(&policies, &zero);

	if (!c)
		return PASS;
	if (c->vlan_proto) {
		__u16 proto, tci;

		if (skb->vlan_present) {
			/* The kernel took the outer tag out of the frame. */
			proto = bpf_ntohs((__u16)skb->vlan_proto);
			tci = (__u16)skb->vlan_tci;
		} else {
			void *data = (void *)(long)skb->data;
			void *data_end = (void *)(long)skb->data_end;
			struct ethhdr *eth = data;
			__be16 *vtci = (__be16 *)(eth + 1);

			if ((void *)(vtci + 2) > data_end)
				return drop(STAT_DROP_VLAN, len);
			proto = bpf_ntohs(eth->h_proto);
			if (proto != ETH_P_8021Q && proto != ETH_P_8021AD)
				return drop(STAT_DROP_VLAN, len);
			tci = bpf_ntohs(*vtci);
		}
		if (proto != c->vlan_proto || (tci & VLAN_VID_MASK) != (c->vlan_tci & VLAN_VID_MASK))
			return drop(STAT_DROP_VLAN, len);
		if (bpf_skb_vlan_pop(skb))
			return drop(STAT_DROP_VLAN, len);
	}
	count(STAT_RX, len);
	return PASS;
}

/* netdra_egress drops frames whose source MAC is not the device's when the
 * spoof check is on, and pushes the configured VLAN tag when software VLAN
 * is on; it counts what the pod sends. */
SEC("tc")
int netdra_egress(struct __sk_buff *skb)
{
	__u32 zero = 0, len = skb->len;
	struct policy *c = bpf_map_lookup_elem(&policies, &zero);

	if (!c)
		return PASS;
	if (c->spoof_chk) {
		void *data = (void *)(long)skb->data;
		void *data_end = (void *)(long)skb->data_end;
		struct ethhdr *eth = data;
		int same = 1;

		if ((void *)(eth + 1) > data_end)
			return drop(STAT_DROP_SPOOF, len);
		/* No memcmp: clang would emit a call the verifier refuses. */
#pragma unroll
		for (int i = 0; i < ETH_ALEN; i++)
			if (eth->h_source[i] != c->mac[i])
				same = 0;
		if (!same)
			return drop(STAT_DROP_SPOOF, len);
	}
	if (c->vlan_proto) {
		if (bpf_skb_vlan_push(skb, bpf_htons(c->vlan_proto), c->vlan_tci))
			return drop(STAT_DROP_VLAN, len);
	}
	count(STAT_TX, len);
	return PASS;
}

char __license[] SEC("license") = "Dual BSD/GPL";
