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
 * PFC's per-(ingress port, priority) accounting, as an 802.1Qbb switch keeps it: port_dequeue,
 * at a switch port's ingress, counts an IPv4 frame into (that port, the class it arrived in) the
 * moment it enters the switch, so frames still waiting in Open vSwitch's input socket count too.
 * The userspace datapath carries no metadata from ingress to egress, so the controller's flows
 * write the ingress port's slot and the frame's arriving DSCP into its Ethernet source address
 * (TAG_MAC0/1, slot, DSCP: controllers/rules.py); port_enqueue, at the egress port, reads them,
 * puts the sender's own address back (from host_mac, by IPv4 source) and carries the ingress
 * queue in skb->cb[1] to where the frame leaves the switch (the far end's ingress), which gives
 * its bytes back. A frame the egress drops gives them back at once.
 *
 * Layouts of struct queue, struct profile, struct hist and struct ingress are mirrored in
 * testbed/fabric/bpfmaps.py.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define VLAN_HLEN 4   /* an 802.1Q tag (linux/if_vlan.h is not a UAPI header) */
#define ROCE_UDP_PORT 4791

#define MAX_QUEUES 16384
#define MAX_CLASSES 8
#define HIST_BUCKETS 32
#define TAG 0x7e000000u
#define TAG_MASK 0xff000000u
#define NON_IP_KEY 64
/* the first two bytes of an ingress-tagged Ethernet source (unicast, locally administered) */
#define TAG_MAC0 0x7e
#define TAG_MAC1 0xcc

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

/* One per (switch port, class) as it is an ingress: what entered the switch there and what has
 * left it. The switch agent owns xoff_bytes (0: not lossless), lost_bytes (frames the switch
 * dropped without an egress seeing them, e.g. on a route being replaced) and byte_ps.
 *
 * How far the link ran ahead of its rate: a hardware link delivers no faster than its rate, and
 * PFC headroom is sized on that; an emulated one can, when the upstream port's HTB bucket lets a
 * burst out after an idle spell or frames bunch up in a CPU's backlog behind a late softirq.
 * ahead_ps is a queue that drains at the link's rate (byte_ps a byte) and that every arrival
 * joins: what it holds, before a frame joins, is what arrived beyond the rate over the recent
 * past (Lindley's recursion). At the row's highest count, peak_ahead_bytes keeps it, so an
 * overrun of the headroom can be told apart: the link's running ahead, or a pause that did not
 * hold (testbed.analysis.qos.headroom_overruns). Frames of one row may arrive on both CPUs at
 * once; the updates are not atomic, so a rare race may miss a frame's share.
 *
 * How long the link held its frames: a frame leaves its upstream's qdisc straight into the veth,
 * whose receive side queues it in a CPU's backlog until a softirq runs this program. A hardware
 * link holds a cable's delay; this one holds what a late softirq leaves waiting, and a row's
 * crossing of XOFF is seen that late, with the bytes behind it already on their way. The kernel
 * stamps each frame (skb->tstamp, CLOCK_REALTIME) as it enters the backlog, while the switch agent
 * holds a socket that asks for timestamps; wire_max_ns is the longest a frame waited there since
 * the row last went above XOFF, kept at its peak as peak_wire_ns. tai_minus_real_ns (the agent's)
 * puts the stamp on bpf_ktime_get_tai_ns's clock. */
struct ingress {
	__u64 in_bytes;
	__u64 in_pkts;
	__u64 out_bytes;
	__u64 out_pkts;
	__u64 xoff_bytes;
	__u64 lost_bytes;
	__u64 xoff_cross_ns;
	__u64 xoff_crossings;
	__u64 byte_ps;           /* the link's time per byte, in ps (0: not measured) */
	__u64 ahead_ns;          /* the last arrival */
	__u64 ahead_ps;          /* the rate-draining queue, with the last arrival in it */
	__u64 peak_held_bytes;   /* the most the row held, counted at each arrival */
	__u64 peak_ahead_bytes;  /* what had arrived beyond the link's rate just before that peak */
	__u64 tai_minus_real_ns; /* the agent's: CLOCK_TAI - CLOCK_REALTIME */
	__u64 wire_max_ns;       /* the longest a frame waited on the link since the row went above XOFF */
	__u64 peak_wire_ns;      /* wire_max_ns at the peak */
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

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct ingress);
} ingress SEC(".maps");

/* IPv4 address of a host (network order) -> its MAC address (the low 6 bytes, in wire order) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} host_mac SEC(".maps");

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

/* Bit errors on a link ([[faults]] corrupt), per switch port slot: a share of the RoCE data frames
 * the port sends get one bit of their payload flipped just before the ICRC, so the receiving NIC's
 * ICRC check rejects them, as a NIC rejects a frame the wire damaged, and go-back-N resends. A
 * switch's own MAC would drop it on its FCS at the next hop instead; the frame lost is the same.
 * Control frames (ACK, NAK, CNP) are left alone: the data plane checks the ICRC of data frames
 * only. The fault injector (testbed.run.faults) owns threshold; frames is the port's count. */
struct corrupt {
	__u32 threshold;   /* a frame is hit when a 32-bit random number falls below it: rate x 2^32 */
	__u32 pad;
	__u64 frames;      /* frames hit: the CRC errors the far end would count */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_QUEUES / MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct corrupt);
} corrupt SEC(".maps");

static __always_inline __u32 lookup_u64(void *map, __u32 key, __u32 dflt)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);
	return v ? (__u32)*v : dflt;
}

/* Class of a frame and its IPv4 header's first 16-bit word (version/IHL and TOS; -1 when not
 * IPv4). Read with bpf_skb_load_bytes: frames a packet socket sends are linear only up to a page,
 * so a 4 KB RoCE frame's IP header is not in the linear head that direct access sees. */
/* Where a frame's network header starts, and its EtherType: a tenant's frames cross the switches
 * with an 802.1Q tag inline (the controller pushes it at the edge and pops it toward the host;
 * controllers/rules.py), which a receiving veth moves out of the data before tc sees it. */
static __always_inline int l3_offset(struct __sk_buff *skb, __u16 *proto)
{
	*proto = 0;
	bpf_skb_load_bytes(skb, 12, proto, 2);
	if (*proto == bpf_htons(ETH_P_8021Q)) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN + 2, proto, 2))
			*proto = 0;
		return ETH_HLEN + VLAN_HLEN;
	}
	return ETH_HLEN;
}

static __always_inline __u32 classify(struct __sk_buff *skb, int *word, int *mac_control, int *l3)
{
	__u16 proto = 0;
	__u8 vt[2];
	__u32 key = NON_IP_KEY;

	*word = -1;
	*l3 = l3_offset(skb, &proto);
	*mac_control = proto == bpf_htons(ETH_P_PAUSE);
	if (proto == bpf_htons(ETH_P_IP) && bpf_skb_load_bytes(skb, *l3, vt, 2) == 0) {
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
static __always_inline int set_ce(struct __sk_buff *skb, int word, int l3)
{
	__u16 old = bpf_htons(word), new = bpf_htons(word | 3);
	__u8 tos = (word | 3) & 0xff;

	if (l3 != ETH_HLEN && l3 != ETH_HLEN + VLAN_HLEN)
		return 0;
	if (bpf_l3_csum_replace(skb, l3 + offsetof(struct iphdr, check), old, new, 2))
		return 0;
	return bpf_skb_store_bytes(skb, l3 + 1, &tos, 1, 0) == 0;
}

#define OP_SEND_LAST 0x02
#define OP_SEND_ONLY 0x04
#define ICRC_LEN 4
#define STAMP_LEN 24   /* the data plane's payload stamp after the BTH: magic, flow, message, sequence, send time */

/* One bit of a RoCE data frame's payload flipped, at the port's rate of bit errors. The stamp that
 * names the frame's queue pair stays whole, so the receiver can tell whose frame it rejected. */
static __always_inline void corrupt_maybe(struct __sk_buff *skb, __u32 slot, int word, int l3)
{
	struct corrupt *c = bpf_map_lookup_elem(&corrupt, &slot);
	__u8 vhl = 0, proto = 0, op = 0xff, byte = 0;
	__u16 dport = 0;

	if (!c || !c->threshold || word < 0)
		return;
	if (bpf_skb_load_bytes(skb, l3, &vhl, 1) || bpf_skb_load_bytes(skb, l3 + 9, &proto, 1) ||
	    proto != IPPROTO_UDP)
		return;
	int l4 = l3 + (vhl & 0xf) * 4;
	if (bpf_skb_load_bytes(skb, l4 + 2, &dport, 2) || dport != bpf_htons(ROCE_UDP_PORT) ||
	    bpf_skb_load_bytes(skb, l4 + 8, &op, 1) || !(op <= OP_SEND_LAST || op == OP_SEND_ONLY))
		return;
	if (bpf_get_prandom_u32() >= c->threshold)
		return;
	/* the payload's last byte: past the BTH (12 bytes) and the stamp, before the ICRC */
	__u32 at = skb->len - ICRC_LEN - 1;
	if (at < (__u32)(l4 + 8 + 12 + STAMP_LEN) || bpf_skb_load_bytes(skb, at, &byte, 1))
		return;
	byte ^= 1 << (bpf_get_prandom_u32() & 7);
	if (bpf_skb_store_bytes(skb, at, &byte, 1, 0) == 0)
		__sync_fetch_and_add(&c->frames, 1);
}

/* A PFC frame (MAC control, 0x8808) the switch agent sends into a port it resumes ends here, as
 * at a real MAC; its enqueue attempt restarts the port's qdisc, which a TBF rate change alone
 * does not do. */
SEC("tc")
int host_enqueue(struct __sk_buff *skb)
{
	int word, mac_control, l3;

	classify(skb, &word, &mac_control, &l3);
	return mac_control ? TC_ACT_SHOT : TC_ACT_OK;
}

/* The ingress queue an ingress-tagged frame counts against (-1: untagged), with the sender's own
 * Ethernet source address put back. */
static __always_inline int untag(struct __sk_buff *skb)
{
	__u8 src[6];
	__u32 saddr;
	__u16 proto;

	if (bpf_skb_load_bytes(skb, ETH_ALEN, src, 6) || src[0] != TAG_MAC0 || src[1] != TAG_MAC1)
		return -1;
	int l3 = l3_offset(skb, &proto);
	__u32 slot = (src[2] << 8) | src[3];
	__u32 cls = lookup_u64(&dscp_class, src[5] & 0x3f, 0);
	if (slot >= MAX_QUEUES / MAX_CLASSES || cls >= MAX_CLASSES)
		return -1;
	if (bpf_skb_load_bytes(skb, l3 + offsetof(struct iphdr, saddr), &saddr, 4) == 0) {
		__u64 *mac = bpf_map_lookup_elem(&host_mac, &saddr);
		if (mac)
			bpf_skb_store_bytes(skb, ETH_ALEN, mac, 6, 0);
	}
	return slot * MAX_CLASSES + cls;
}

static __always_inline void left_switch(int k, __u64 len)
{
	__u32 key = k;
	struct ingress *in = bpf_map_lookup_elem(&ingress, &key);

	if (in) {
		__sync_fetch_and_add(&in->out_bytes, len);
		__sync_fetch_and_add(&in->out_pkts, 1);
	}
}

SEC("tc")
int port_enqueue(struct __sk_buff *skb)
{
	int word, mac_control, l3;
	int k = untag(skb);
	__u32 cls = classify(skb, &word, &mac_control, &l3);
	__u32 ifindex = skb->ifindex;
	/* A tenant's tag is inline here, and out of the data when the frame arrives at the far end
	 * (the receiving veth moves it into the skb's metadata), where the queue is closed and the
	 * next switch's ingress opened: every count leaves it out, so both ends count alike. */
	__u64 len = skb->len - (l3 == ETH_HLEN + VLAN_HLEN ? VLAN_HLEN : 0);

	if (mac_control)
		return TC_ACT_SHOT;
	__u32 *slot = bpf_map_lookup_elem(&port_slot, &ifindex);

	if (!slot)
		goto untracked;
	__u32 q = *slot * MAX_CLASSES + cls;
	struct queue *st = bpf_map_lookup_elem(&queues, &q);
	struct profile *pr = bpf_map_lookup_elem(&profiles, &q);
	struct hist *hi = bpf_map_lookup_elem(&hists, &q);
	/* limit 0: the switch agent has not applied this queue's policy yet (Mininet hosts send
	 * router solicitations as links come up): pass it, unaccounted */
	if (!st || !pr || !hi || !pr->limit_bytes)
		goto untracked;

	__u64 depth = st->depth_bytes;
	if (depth + len > pr->limit_bytes) {
		__sync_fetch_and_add(&st->drop_pkts, 1);
		if (k >= 0)
			left_switch(k, len);
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
			if (p && (bpf_get_prandom_u32() & 0xffff) < p && set_ce(skb, word, l3)) {
				__sync_fetch_and_add(&st->mark_pkts, 1);
				__sync_fetch_and_add(&hi->marked[b], 1);
			}
		}
	}
	__sync_fetch_and_add(&st->depth_bytes, len);
	__sync_fetch_and_add(&st->enq_bytes, len);
	__sync_fetch_and_add(&st->enq_pkts, 1);
	if (pr->xoff_bytes && depth < pr->xoff_bytes && depth + len >= pr->xoff_bytes) {
		/* the first crossing since the agent re-armed the row (0): a pause is due from then,
		 * however often the count dips back under XOFF before the agent looks */
		if (!st->xoff_cross_ns)
			st->xoff_cross_ns = bpf_ktime_get_ns();
		__sync_fetch_and_add(&st->xoff_crossings, 1);
	}
	skb->cb[0] = TAG | q;
	skb->cb[1] = k >= 0 ? TAG | k : 0;
	corrupt_maybe(skb, *slot, word, l3);
	return TC_ACT_OK;

untracked:
	/* no egress queue will see it leave: it has left the switch as far as its ingress knows */
	if (k >= 0)
		left_switch(k, len);
	skb->cb[1] = 0;
	return TC_ACT_OK;
}

static __always_inline void dequeued(struct __sk_buff *skb)
{
	__u32 tag = skb->cb[0], itag = skb->cb[1];

	if ((itag & TAG_MASK) == TAG) {
		skb->cb[1] = 0;
		left_switch(itag & ~TAG_MASK, skb->len);
	}
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

/* A switch port's ingress: the upstream's queue is closed, and an IPv4 frame enters the switch's
 * ingress accounting (the frames the controller's flows tag: controllers/rules.py). */
SEC("tc")
int port_dequeue(struct __sk_buff *skb)
{
	__u16 proto = 0;
	int word, mac_control, l3;
	__u32 ifindex = skb->ifindex;

	dequeued(skb);
	l3_offset(skb, &proto);
	if (proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	__u32 *slot = bpf_map_lookup_elem(&port_slot, &ifindex);
	if (!slot)
		return TC_ACT_OK;
	__u32 k = *slot * MAX_CLASSES + classify(skb, &word, &mac_control, &l3);
	struct ingress *in = bpf_map_lookup_elem(&ingress, &k);
	if (!in)
		return TC_ACT_OK;
	__u64 len = skb->len;
	__u64 held = in->in_bytes - in->out_bytes - in->lost_bytes;
	__sync_fetch_and_add(&in->in_bytes, len);
	__sync_fetch_and_add(&in->in_pkts, 1);
	if (in->byte_ps) {
		__u64 now = bpf_ktime_get_ns(), dt = now - in->ahead_ns, excess = 0;
		/* a second apart the queue is empty at any rate here (and dt * 1000 stays in range) */
		if (dt < 1000000000ULL && in->ahead_ps > dt * 1000)
			excess = in->ahead_ps - dt * 1000;
		in->ahead_ns = now;
		in->ahead_ps = excess + len * in->byte_ps;
		__u64 stamp = skb->tstamp, wire = 0;
		if (stamp) {
			__u64 tai = bpf_ktime_get_tai_ns(), sent = stamp + in->tai_minus_real_ns;
			wire = tai > sent ? tai - sent : 0;
		}
		if (in->xoff_bytes && (__s64)(held + len) < (__s64)in->xoff_bytes)
			in->wire_max_ns = 0;
		else if (wire > in->wire_max_ns)
			in->wire_max_ns = wire;
		if ((__s64)(held + len) > (__s64)in->peak_held_bytes) {
			in->peak_held_bytes = held + len;
			in->peak_ahead_bytes = excess / in->byte_ps;
			in->peak_wire_ns = in->wire_max_ns;
		}
	}
	if (in->xoff_bytes && (__s64)held < (__s64)in->xoff_bytes && (__s64)(held + len) >= (__s64)in->xoff_bytes) {
		if (!in->xoff_cross_ns)
			in->xoff_cross_ns = bpf_ktime_get_ns();
		__sync_fetch_and_add(&in->xoff_crossings, 1);
	}
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

#ifndef SOURCE_SHA256
#error "build with `make bpf`: it passes this file's SHA-256 as SOURCE_SHA256"
#endif
/* read back by testbed/built.py, to tell this build from one of another source; libbpf skips the
 * section */
const char source_sha256[] SEC(".testbed_source") __attribute__((used)) = "testbed-source-sha256:" SOURCE_SHA256;
