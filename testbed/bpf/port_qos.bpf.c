// SPDX-License-Identifier: GPL-2.0
/* Per-packet switch-port behaviour that the kernel here has no qdisc for (no red, no prio):
 * classification into the port's priority classes, tail drop at the class's buffer limit,
 * RED/ECN marking from the class's queue depth, and the XOFF crossing time for PFC.
 *
 * port_enqueue runs as the cls_bpf classifier of every switch port's HTB root, i.e. at the
 * moment a packet joins the port's queue. port_dequeue runs at clsact ingress of the far end
 * of the link, i.e. when the packet has left the queue. Between the two, the queue's depth is
 * exact: port_enqueue tags skb->priority with the queue's index (veth keeps skb->priority
 * across namespaces) and port_dequeue gives the bytes back. The buffer limit is enforced here,
 * so the leaf qdisc (sized a little larger) never drops and the depth never drifts.
 * host_enqueue only classifies a host NIC's packets (hosts mark nothing).
 *
 * Layouts of struct queue, struct profile and struct hist are mirrored in testbed/bpfmaps.py.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#define ROCE_UDP_PORT 4791

#define MAX_QUEUES 16384
#define MAX_CLASSES 8
#define HIST_BUCKETS 32
#define TAG 0x7e000000u
#define TAG_MASK 0xff000000u
#define NON_IP_KEY 64

struct queue {
	__u64 depth_bytes;
	__u64 enq_bytes;
	__u64 enq_pkts;
	__u64 deq_bytes;
	__u64 deq_pkts;
	__u64 drop_pkts;
	__u64 ect_pkts;
	__u64 mark_pkts;
	__u64 xoff_cross_ns;
	__u64 xoff_crossings;
};

struct profile {
	__u32 limit_bytes;
	__u32 kmin_bytes;
	__u32 kmax_bytes;
	__u32 pmax_q16;   /* Pmax x 65536 */
	__u32 ecn_on;
	__u32 xoff_bytes; /* 0: no PFC on this queue */
	__u32 hist_bucket_bytes;
	__u32 pad;
};

struct hist {
	__u64 ect[HIST_BUCKETS];
	__u64 marked[HIST_BUCKETS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct queue);
} queues SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct profile);
} profiles SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct hist);
} hists SEC(".maps");

/* DSCP (0..63) -> class index; entry 64 is the class of non-IP frames; entry 66 holds the minor
 * number of class 0's HTB leaf class. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 72);
	__type(key, __u32);
	__type(value, __u64); /* array elements are 8-byte aligned in the mmap anyway */
} dscp_class SEC(".maps");

/* ifindex of a switch port (root namespace) -> its slot; queue index = slot * MAX_CLASSES + class */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_QUEUES / MAX_CLASSES);
	__type(key, __u32);
	__type(value, __u32);
} port_slot SEC(".maps");

static __always_inline __u32 lookup_u64(void *map, __u32 key, __u32 dflt)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);
	return v ? (__u32)*v : dflt;
}

/* Class of a frame and its IPv4 header's first 16-bit word (version/IHL and TOS; -1 when not
 * IPv4). Read with bpf_skb_load_bytes: frames a packet socket sends are linear only up to a page,
 * so a 4 KB RoCE frame's IP header is not in the linear head that direct access sees. */
static __always_inline __u32 classify(struct __sk_buff *skb, int *word, int *mac_control)
{
	__u16 proto = 0;
	__u8 vt[2];
	__u32 key = NON_IP_KEY;

	*word = -1;
	bpf_skb_load_bytes(skb, 12, &proto, 2);
	*mac_control = proto == bpf_htons(ETH_P_PAUSE);
	if (proto == bpf_htons(ETH_P_IP) && bpf_skb_load_bytes(skb, ETH_HLEN, vt, 2) == 0) {
		*word = (vt[0] << 8) | vt[1];
		key = vt[1] >> 2;
	}
	__u32 cls = lookup_u64(&dscp_class, key, 0);
	if (cls >= MAX_CLASSES)
		cls = 0;
	/* tc_classid is 16 bits wide: the minor only; the filter's own classid supplies the major */
	skb->tc_classid = lookup_u64(&dscp_class, 66, 0x10) + cls;
	return cls;
}

/* Set CE in the IPv4 header at ETH_HLEN, fixing the header checksum (RFC 1624). Done by hand:
 * bpf_skb_ecn_set_ce trusts skb's network header, which a packet socket's frames do not set. */
static __always_inline int set_ce(struct __sk_buff *skb, int word)
{
	__u16 old = bpf_htons(word), new = bpf_htons(word | 3);
	__u8 tos = (word | 3) & 0xff;

	if (bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), old, new, 2))
		return 0;
	return bpf_skb_store_bytes(skb, ETH_HLEN + 1, &tos, 1, 0) == 0;
}

/* A PFC frame (MAC control, 0x8808) the switch agent sends into a port it resumes ends here, as
 * at a real MAC; its enqueue attempt restarts the port's qdisc, which a TBF rate change alone
 * does not do. */
SEC("tc")
int host_enqueue(struct __sk_buff *skb)
{
	int word, mac_control;

	classify(skb, &word, &mac_control);
	return mac_control ? TC_ACT_SHOT : TC_ACT_OK;
}

SEC("tc")
int port_enqueue(struct __sk_buff *skb)
{
	int word, mac_control;
	__u32 cls = classify(skb, &word, &mac_control);
	__u32 ifindex = skb->ifindex;

	if (mac_control)
		return TC_ACT_SHOT;
	__u32 *slot = bpf_map_lookup_elem(&port_slot, &ifindex);

	if (!slot)
		return TC_ACT_OK;
	__u32 q = *slot * MAX_CLASSES + cls;
	struct queue *st = bpf_map_lookup_elem(&queues, &q);
	struct profile *pr = bpf_map_lookup_elem(&profiles, &q);
	struct hist *hi = bpf_map_lookup_elem(&hists, &q);
	/* limit 0: the switch agent has not applied this queue's policy yet (Mininet hosts send
	 * router solicitations as links come up): pass it, unaccounted */
	if (!st || !pr || !hi || !pr->limit_bytes)
		return TC_ACT_OK;

	__u64 len = skb->len;
	__u64 depth = st->depth_bytes;
	if (depth + len > pr->limit_bytes) {
		__sync_fetch_and_add(&st->drop_pkts, 1);
		return TC_ACT_SHOT;
	}
	int ecn = word >= 0 ? word & 3 : 0;
	if (ecn) {
		__u32 b = pr->hist_bucket_bytes ? depth / pr->hist_bucket_bytes : 0;
		if (b >= HIST_BUCKETS)
			b = HIST_BUCKETS - 1;
		__sync_fetch_and_add(&st->ect_pkts, 1);
		__sync_fetch_and_add(&hi->ect[b], 1);
		/* CE from an earlier hop stays CE and is not counted again */
		if (pr->ecn_on && ecn != 3) {
			__u64 p;
			if (depth < pr->kmin_bytes)
				p = 0;
			else if (depth >= pr->kmax_bytes)
				p = 65536;
			else
				p = (__u64)pr->pmax_q16 * (depth - pr->kmin_bytes) / (pr->kmax_bytes - pr->kmin_bytes);
			if (p && (bpf_get_prandom_u32() & 0xffff) < p && set_ce(skb, word)) {
				__sync_fetch_and_add(&st->mark_pkts, 1);
				__sync_fetch_and_add(&hi->marked[b], 1);
			}
		}
	}
	__sync_fetch_and_add(&st->depth_bytes, len);
	__sync_fetch_and_add(&st->enq_bytes, len);
	__sync_fetch_and_add(&st->enq_pkts, 1);
	if (pr->xoff_bytes && depth < pr->xoff_bytes && depth + len >= pr->xoff_bytes) {
		st->xoff_cross_ns = bpf_ktime_get_ns();
		__sync_fetch_and_add(&st->xoff_crossings, 1);
	}
	skb->cb[0] = TAG | q;
	return TC_ACT_OK;
}

static __always_inline void dequeued(struct __sk_buff *skb)
{
	__u32 tag = skb->cb[0];

	if ((tag & TAG_MASK) != TAG)
		return;
	__u32 q = tag & ~TAG_MASK;
	struct queue *st = bpf_map_lookup_elem(&queues, &q);
	skb->cb[0] = 0;
	if (!st)
		return;
	__u64 len = skb->len;
	__sync_fetch_and_add(&st->depth_bytes, -len);
	__sync_fetch_and_add(&st->deq_bytes, len);
	__sync_fetch_and_add(&st->deq_pkts, 1);
}

SEC("tc")
int port_dequeue(struct __sk_buff *skb)
{
	dequeued(skb);
	return TC_ACT_OK;
}

/* A host NIC's ingress: the queue at the other end of the link is closed as at a switch port,
 * and RoCEv2 frames (IPv4, UDP to 4791) end here, consumed by the NIC as a RoCE NIC consumes
 * them: the data plane's packet socket has them already (it taps the device ahead of ingress),
 * and the host's IP stack would only look up a UDP socket to drop them into. */
SEC("tc")
int host_dequeue(struct __sk_buff *skb)
{
	__u16 proto = 0, dport = 0;
	__u8 vhl = 0, ipproto = 0;

	dequeued(skb);
	if (bpf_skb_load_bytes(skb, 12, &proto, 2) || proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &vhl, 1) || bpf_skb_load_bytes(skb, ETH_HLEN + 9, &ipproto, 1) ||
	    ipproto != IPPROTO_UDP)
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + (vhl & 0xf) * 4 + 2, &dport, 2))
		return TC_ACT_OK;
	return dport == bpf_htons(ROCE_UDP_PORT) ? TC_ACT_SHOT : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
