/* The NIC data plane: every emulated host's RoCE NIC in one loop, in C.
 *
 * Python (testbed.traffic.engine) builds the plan, opens the sockets inside each host's namespace and
 * calls nic_run(); the unit tests load this same library and drive its go-back-N and DCQCN
 * state machines directly (testbed.traffic.nic). There is no second implementation of the transport.
 *
 * Pacing: the host NIC's HTB class (kernel) serialises frames at the link rate. This loop keeps
 * a lead of frames queued in each NIC class, so that the wire stays busy while the scheduler
 * keeps the loop off the CPU. It learns when each frame left for the wire from its software TX
 * timestamp (SO_TIMESTAMPING, SCM_TSTAMP_SND, taken by the veth driver after the qdisc released
 * it), which is also the departure time the records keep. Receive times are the kernel's
 * (SO_TIMESTAMPNS), so the loop's own lag shows in neither.
 *
 * Queue pairs: RC order, one message after another per QP; QPs of a class share the NIC round
 * robin per packet; DCQCN's rate limiter paces a throttled QP in this loop.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <linux/if_packet.h>
#include <linux/net_tstamp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#ifndef SOURCE_SHA256
#error "build with `make nic`: it passes this file's SHA-256 as SOURCE_SHA256"
#endif
/* read back by testbed/built.py, to tell this build from one of another source */
__attribute__((used)) static const char source_sha256[] = "testbed-source-sha256:" SOURCE_SHA256;

#define PSN_MOD (1LL << 24)
#define PSN_HALF (1LL << 23)
#define AETH_ACK 0x1F
#define AETH_NAK_SEQ 0x60

#define OP_SEND_FIRST 0x00
#define OP_SEND_MIDDLE 0x01
#define OP_SEND_LAST 0x02
#define OP_SEND_ONLY 0x04
#define OP_ACK 0x11
#define OP_CNP 0x81
#define ACKREQ 0x80000000u
#define PAYLOAD_MAGIC 0x54425031u
#define QPN_BASE 0x100

#define IP_OFF 14
#define UDP_OFF 34
#define BTH_OFF 42
#define PSN_OFF 50
#define PAYLOAD_OFF 54
#define STAMP_LEN 24
#define HDR_LEN (PAYLOAD_OFF + STAMP_LEN) /* 78: headers and the payload stamp */
#define ICRC_LEN 4
#define HEADER_BYTES (PAYLOAD_OFF + ICRC_LEN)
#define MAX_FRAME 9300

#define MAX_CLASSES 8
#define BATCH 64
#define NEVER (1LL << 62)
/* A dry NIC queue shorter than this is the loop's own timer slack, not a stall. */
#define DRY_MIN_NS 20000
/* Departures are read at least this often, whatever the lead: the records stay current. */
#define DRAIN_MAX_NS 2000000
/* After the last message completes: how long frames still in flight may take to arrive. */
#define DRAIN_TAIL_NS 300000000

/* ---------------------------------------------------------------------------------------- */
/* Go-back-N, as RoCE RC NICs run it. PSNs are unbounded here, 24 bits on the wire.          */

typedef struct {
    int64_t next;          /* next new PSN */
    int64_t una;           /* oldest unacknowledged PSN (una == next: nothing outstanding) */
    int64_t resend;        /* going back: next PSN to resend, up to resend_end */
    int64_t resend_end;
    int64_t last_progress_ns;
    uint64_t retransmitted, naks, timeouts;
} gbn_sender;

typedef struct {
    int64_t expected;
    int32_t since_ack, nak_outstanding, ack_every, _pad;
    uint64_t out_of_order, duplicates;
    /* HPCC's receiver NAKs a gap again when a frame past it arrives nak_interval_ns after its last
     * NAK (rdma-hw.cc m_nack_interval): a lost NAK or a lost resend then costs an interval, not
     * the sender's RTO. 0: once per gap. */
    int64_t last_nak_ns, nak_interval_ns;
} gbn_receiver;

int64_t psn_unwrap(int64_t psn24, int64_t reference) {
    int64_t delta = ((psn24 - reference) % PSN_MOD + PSN_MOD) % PSN_MOD;
    return delta < PSN_HALF ? reference + delta : reference + delta - PSN_MOD;
}

void gbn_sender_init(gbn_sender *s, int64_t start_psn) {
    memset(s, 0, sizeof *s);
    s->next = s->una = s->resend = s->resend_end = start_psn;
}

int gbn_resending(const gbn_sender *s) { return s->resend < s->resend_end; }

int64_t gbn_sent_new(gbn_sender *s, int64_t now) {
    if (s->una == s->next) s->last_progress_ns = now;
    return s->next++;
}

/* Everything up to and including psn24 is acknowledged; returns how many PSNs that freed
 * (they are [old una, una)). */
int64_t gbn_acked(gbn_sender *s, int64_t psn24, int64_t now) {
    if (s->una == s->next) return 0;
    int64_t upto = psn_unwrap(psn24, s->una);
    if (upto >= s->next) upto = s->next - 1;
    if (upto < s->una) return 0;
    int64_t freed = upto + 1 - s->una;
    s->una = upto + 1;
    s->last_progress_ns = now;
    if (s->resend < s->una) s->resend = s->una < s->resend_end ? s->una : s->resend_end;
    return freed;
}

static void gbn_go_back(gbn_sender *s) {
    s->resend = s->una;
    s->resend_end = s->next;
    s->retransmitted += (uint64_t)(s->next - s->una);
}

/* The receiver expects psn24: everything before it arrived, resend from it on. Returns the
 * PSNs the implied ACK freed. */
int64_t gbn_nacked(gbn_sender *s, int64_t psn24, int64_t now) {
    int64_t freed = s->una != s->next ? gbn_acked(s, (psn24 - 1 + PSN_MOD) % PSN_MOD, now) : 0;
    s->naks++;
    /* already going back over that PSN: a NAK from the old packets still in flight */
    if (gbn_resending(s) && s->resend <= psn_unwrap(psn24, s->resend)) return freed;
    gbn_go_back(s);
    return freed;
}

int gbn_timed_out(gbn_sender *s, int64_t now, int64_t rto_ns) {
    if (s->una != s->next && !gbn_resending(s) && now - s->last_progress_ns > rto_ns) {
        s->timeouts++;
        s->last_progress_ns = now;
        gbn_go_back(s);
        return 1;
    }
    return 0;
}

void gbn_receiver_init(gbn_receiver *r, int32_t ack_every, int64_t start_psn, int64_t nak_interval_ns) {
    memset(r, 0, sizeof *r);
    r->ack_every = ack_every;
    r->expected = start_psn;
    r->nak_interval_ns = nak_interval_ns;
}

/* Returns 1 if accepted; *reply is the AETH syndrome to send (0: none), *reply_psn its PSN. */
int gbn_received(gbn_receiver *r, int64_t psn24, int last_of_message, int64_t now, int32_t *reply,
                 int64_t *reply_psn) {
    int64_t psn = psn_unwrap(psn24, r->expected);
    *reply = 0;
    *reply_psn = 0;
    if (psn == r->expected) {
        r->expected++;
        r->nak_outstanding = 0;
        r->since_ack++;
        if (last_of_message || r->since_ack >= r->ack_every) {
            r->since_ack = 0;
            *reply = AETH_ACK;
            *reply_psn = (r->expected - 1) % PSN_MOD;
        }
        return 1;
    }
    if (psn > r->expected) {
        r->out_of_order++;
        if (!r->nak_outstanding || (r->nak_interval_ns > 0 && now - r->last_nak_ns >= r->nak_interval_ns)) {
            r->nak_outstanding = 1;
            r->last_nak_ns = now;
            *reply = AETH_NAK_SEQ;
            *reply_psn = r->expected % PSN_MOD;
        }
        return 0;
    }
    r->duplicates++;
    *reply = AETH_ACK;
    *reply_psn = ((r->expected - 1) % PSN_MOD + PSN_MOD) % PSN_MOD;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* DCQCN's reaction point, as HPCC's rdma-hw.cc runs it (see testbed/traffic/transport.py for the   */
/* parameters and their time dilation).                                                       */

enum { RATE_CUT = 6, RATE_FAST_RECOVERY = 7, RATE_ADDITIVE = 8, RATE_HYPER = 9 };

typedef struct {
    double line_bps, min_rate_bps, rai_bps, rhai_bps, g, rate_on_first_cnp;
    int64_t cnp_interval_ns, alpha_interval_ns, rate_decrease_interval_ns, rate_increase_timer_ns;
    int64_t byte_counter_bytes;
    int32_t fast_recovery_rounds, clamp_target_rate;
} dcqcn_params;

#define DCQCN_LOG 64
typedef struct {
    int64_t t_ns;
    int32_t kind, _pad;
    double rate, target, alpha;
} rate_event;

typedef struct {
    dcqcn_params p;
    double rate, target, alpha;
    int32_t first, running, cnp_alpha, cut_pending;
    int64_t last_cut_ns, next_alpha_ns, next_cut_ns, next_increase_ns;
    int64_t timer_stage, byte_stage, bytes;
    uint64_t cuts, cnps;
    int32_t n_log, _pad;
    rate_event log[DCQCN_LOG];
} dcqcn;

static void dc_log(dcqcn *d, int64_t t, int kind) {
    if (d->n_log < DCQCN_LOG) {
        rate_event *e = &d->log[d->n_log++];
        e->t_ns = t; e->kind = kind; e->rate = d->rate; e->target = d->target; e->alpha = d->alpha;
    }
}

void dcqcn_init(dcqcn *d, const dcqcn_params *p) {
    memset(d, 0, sizeof *d);
    d->p = *p;
    d->rate = d->target = p->line_bps;
    d->alpha = 1.0;
    d->first = 1;
    d->last_cut_ns = -NEVER;
    d->next_alpha_ns = d->next_cut_ns = d->next_increase_ns = NEVER;
}

static void dc_cut(dcqcn *d, int64_t t) {
    if (d->p.clamp_target_rate || d->timer_stage || d->byte_stage) d->target = d->rate;
    double r = d->rate * (1 - d->alpha / 2);
    d->rate = r > d->p.min_rate_bps ? r : d->p.min_rate_bps;
    d->cut_pending = 0;
    d->next_cut_ns = NEVER;
    d->last_cut_ns = t;
    d->timer_stage = d->byte_stage = d->bytes = 0;
    d->next_increase_ns = t + d->p.rate_increase_timer_ns;
    d->cuts++;
    dc_log(d, t, RATE_CUT);
}

/* One increase event. The stage is compared before its counter moves (HPCC's
 * RateIncEventTimerMlx): stages 0..F-1 are fast recovery, F additive, beyond hyper. */
static void dc_increase(dcqcn *d, int64_t t, int64_t stage) {
    int kind;
    int64_t f = d->p.fast_recovery_rounds;
    if (stage < f) {
        kind = RATE_FAST_RECOVERY;
    } else if (stage == f) {
        kind = RATE_ADDITIVE;
        d->target = d->target + d->p.rai_bps < d->p.line_bps ? d->target + d->p.rai_bps : d->p.line_bps;
    } else {
        kind = RATE_HYPER;
        d->target = d->target + d->p.rhai_bps < d->p.line_bps ? d->target + d->p.rhai_bps : d->p.line_bps;
    }
    double r = (d->rate + d->target) / 2;
    d->rate = r < d->p.line_bps ? r : d->p.line_bps;
    dc_log(d, t, kind);
    if (d->rate >= d->p.line_bps * (1 - 1e-9) && !d->cut_pending) {
        /* back at line rate: nothing left to recover; alpha's decay is caught up at the next CNP */
        d->rate = d->target = d->p.line_bps;
        d->running = 0;
        d->next_increase_ns = NEVER;
    }
}

void dcqcn_advance(dcqcn *d, int64_t now) {
    while (d->running) {
        int64_t t = d->next_alpha_ns;
        if (d->next_cut_ns < t) t = d->next_cut_ns;
        if (d->next_increase_ns < t) t = d->next_increase_ns;
        if (t > now) return;
        if (t == d->next_cut_ns) {
            dc_cut(d, t);
        } else if (t == d->next_alpha_ns) {
            d->alpha = (1 - d->p.g) * d->alpha + (d->cnp_alpha ? d->p.g : 0.0);
            d->cnp_alpha = 0;
            d->next_alpha_ns = t + d->p.alpha_interval_ns;
        } else {
            int64_t stage = d->timer_stage > d->byte_stage ? d->timer_stage : d->byte_stage;
            d->timer_stage++;
            d->next_increase_ns = t + d->p.rate_increase_timer_ns;
            dc_increase(d, t, stage);
        }
    }
}

void dcqcn_cnp(dcqcn *d, int64_t now) {
    const dcqcn_params *p = &d->p;
    d->cnps++;
    if (d->first) {
        d->first = 0;
        d->alpha = 1.0;
        double r = d->rate * p->rate_on_first_cnp;
        d->target = d->rate = r > p->min_rate_bps ? r : p->min_rate_bps;
        d->next_alpha_ns = now + p->alpha_interval_ns;
    } else {
        d->cnp_alpha = 1;
        if (!d->running) {
            /* alpha kept decaying while the machine rested: one decay per tick due by now (none
             * when the next was not due yet; C's division rounds toward zero, so that case is
             * taken apart) */
            int64_t missed = now >= d->next_alpha_ns ? (now - d->next_alpha_ns) / p->alpha_interval_ns + 1 : 0;
            for (int64_t i = 0; i < missed && i < 100000; i++) d->alpha *= (1 - p->g);
            d->next_alpha_ns += missed * p->alpha_interval_ns;
        }
    }
    d->running = 1;
    if (!d->cut_pending) {
        d->cut_pending = 1;
        int64_t t = d->last_cut_ns + p->rate_decrease_interval_ns;
        d->next_cut_ns = now > t ? now : t;
    }
    dcqcn_advance(d, now);
}

/* The byte counter: one increase event per byte_counter_bytes sent since the last cut. */
void dcqcn_sent(dcqcn *d, int64_t nbytes, int64_t now) {
    int64_t b = d->p.byte_counter_bytes;
    if (!(d->running && b)) return;
    d->bytes += nbytes;
    if (d->bytes >= b) {
        d->bytes -= b;
        int64_t stage = d->timer_stage > d->byte_stage ? d->timer_stage : d->byte_stage;
        d->byte_stage++;
        dc_increase(d, now, stage);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* RoCEv2 frames: the ICRC (IBA annex A17) over a pseudo-header with the variant fields       */
/* masked to ones. A data frame's payload past the stamp is zero, so its CRC is the CRC of    */
/* the headers and stamp combined with that of the zeros (zlib's crc32_combine_op).           */

static unsigned char zeros[MAX_FRAME];
static uLong zero_crc[MAX_FRAME + 1], zero_op[MAX_FRAME + 1];
static char zero_ready[MAX_FRAME + 1];

static void zero_tail(int len, uLong *crc, uLong *op) {
    if (!zero_ready[len]) {
        zero_crc[len] = crc32(0L, zeros, (uInt)len);
        zero_op[len] = crc32_combine_gen((z_off_t)len);
        zero_ready[len] = 1;
    }
    *crc = zero_crc[len];
    *op = zero_op[len];
}

/* CRC of the masked pseudo-header: 8 bytes of ones (LRH), IP with tos, ttl and checksum
 * masked, UDP with its checksum masked, the first 8 bytes of the BTH with byte 4 masked. */
static uLong pseudo_crc(const unsigned char *f) {
    unsigned char p[44];
    memset(p, 0xFF, 8);
    memcpy(p + 8, f + IP_OFF, 20);
    p[8 + 1] = p[8 + 8] = p[8 + 10] = p[8 + 11] = 0xFF;
    memcpy(p + 28, f + UDP_OFF, 8);
    p[28 + 6] = p[28 + 7] = 0xFF;
    memcpy(p + 36, f + BTH_OFF, 8);
    p[36 + 4] = 0xFF;
    return crc32(0L, p, 44);
}

/* ICRC of a whole frame of `len` bytes, the last four being the ICRC itself. */
uint32_t roce_icrc(const unsigned char *f, int len) {
    uLong c = crc32(pseudo_crc(f), f + PSN_OFF, (uInt)(len - ICRC_LEN - PSN_OFF));
    return (uint32_t)c;
}

static void put16(unsigned char *p, unsigned v) { p[0] = v >> 8; p[1] = v & 0xFF; }
static void put32(unsigned char *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }
static void put64(unsigned char *p, uint64_t v) { put32(p, v >> 32); put32(p + 4, (uint32_t)v); }
static uint32_t get32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint64_t get64(const unsigned char *p) { return ((uint64_t)get32(p) << 32) | get32(p + 4); }

static void ip_checksum(unsigned char *ip) {
    uint32_t s = 0;
    ip[10] = ip[11] = 0;
    for (int i = 0; i < 20; i += 2) s += (ip[i] << 8) | ip[i + 1];
    while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
    put16(ip + 10, ~s & 0xFFFF);
}

/* Build a data frame's first HDR_LEN bytes from the flow's 54-byte header prefix (Ethernet,
 * IPv4, UDP, BTH, built by Scapy in testbed.traffic.packets) and return its ICRC; the frame is those
 * bytes, payload_len - STAMP_LEN zeros, and the ICRC (little-endian). */
uint32_t roce_data_frame(unsigned char *hdr, const unsigned char *prefix, int opcode, int64_t psn, int ackreq,
                         uint32_t flow, uint32_t msg, uint32_t seq, int64_t tx_ns, int payload_len) {
    int len = PAYLOAD_OFF + payload_len + ICRC_LEN;
    memcpy(hdr, prefix, PAYLOAD_OFF);
    put16(hdr + IP_OFF + 2, len - IP_OFF);
    ip_checksum(hdr + IP_OFF);
    put16(hdr + UDP_OFF + 4, len - UDP_OFF);
    hdr[BTH_OFF] = (unsigned char)opcode;
    put32(hdr + PSN_OFF, ((uint32_t)(psn & 0xFFFFFF)) | (ackreq ? ACKREQ : 0));
    put32(hdr + PAYLOAD_OFF, PAYLOAD_MAGIC);
    put32(hdr + PAYLOAD_OFF + 4, flow);
    put32(hdr + PAYLOAD_OFF + 8, msg);
    put32(hdr + PAYLOAD_OFF + 12, seq);
    put64(hdr + PAYLOAD_OFF + 16, (uint64_t)tx_ns);
    uLong c = crc32(pseudo_crc(hdr), hdr + PSN_OFF, HDR_LEN - PSN_OFF);
    int tail = payload_len - STAMP_LEN;
    if (tail > 0) {
        uLong zc, op;
        zero_tail(tail, &zc, &op);
        c = crc32_combine_op(c, zc, op);
    }
    return (uint32_t)c;
}

/* A received data frame's ICRC check: the same CRC over the bytes as they arrived. */
static int icrc_ok(const unsigned char *f, int n) {
    uint32_t want = (uint32_t)f[n - 4] | ((uint32_t)f[n - 3] << 8) | ((uint32_t)f[n - 2] << 16) |
                    ((uint32_t)f[n - 1] << 24);
    int tail = n - ICRC_LEN - HDR_LEN;
    uLong c = crc32(pseudo_crc(f), f + PSN_OFF, HDR_LEN - PSN_OFF);
    if (tail > 0) {
        if (f[HDR_LEN] == 0 && memcmp(f + HDR_LEN, f + HDR_LEN + 1, tail - 1) == 0) {
            uLong zc, op;
            zero_tail(tail, &zc, &op);
            c = crc32_combine_op(c, zc, op);
        } else {
            c = crc32(c, f + HDR_LEN, (uInt)tail);
        }
    }
    return (uint32_t)c == want;
}

/* ---------------------------------------------------------------------------------------- */
/* The plan, as testbed.traffic.engine hands it over (mirrored there with ctypes).                    */

typedef struct {
    int32_t n_hosts, n_flows, n_msgs, payload_bytes;
    int32_t reliable, cc, verify_icrc, ack_every;
    int64_t rto_ns, time_limit_ns, stall_ns, lead_ns, batch_ns, cc_tick_ns, nak_interval_ns;
    const char *tx_path, *rx_path, *qp_path, *gap_path, *heartbeat_path;
    /* hosts */
    const int32_t *host_rx_fd;      /* [n_hosts]: receives, and sends ACKs and CNPs */
    const int32_t *host_data_fd;    /* [n_hosts * MAX_CLASSES]: one per NIC class, -1 if unused */
    const int32_t *host_door_fd;    /* [n_hosts]: receives a copy of each message's last frame */
    const double *host_bw_bps;      /* [n_hosts] */
    /* flows (queue pairs) */
    const int32_t *flow_src, *flow_dst, *flow_cls, *flow_n_msgs;
    const unsigned char *flow_prefix;   /* [n_flows * 54] */
    const unsigned char *flow_ack;      /* [n_flows * 62]: RC ACKNOWLEDGE template */
    const unsigned char *flow_cnp;      /* [n_flows * 74]: sealed CNP */
    const dcqcn_params *flow_dcqcn;     /* [n_flows] */
    /* messages: flow -1 is compute (duration_ns, no packets) */
    const int32_t *msg_flow;
    const int64_t *msg_bytes, *msg_duration_ns;
    const int32_t *msg_waiting;         /* dependencies not yet complete */
    const int32_t *dep_ptr, *dep_idx;   /* CSR: the messages that wait for each message */
    /* per flow: the path's propagation and switch latency, dilated (0: none); a frame of the flow
     * (data at its receiver, ACK, NAK or CNP back at its sender) is acted on that long after the
     * kernel received it */
    const int64_t *flow_delay_ns;
    /* per message: a compute step's stream (its host's GPU; -1 for a transfer). A stream runs its
     * steps one at a time in the order they were released, as a GPU runs the kernels of one stream */
    const int32_t *msg_stream;
    int32_t n_streams;
    /* per message: 1 for a compute step the synchronisation share weighs (tag "compute": not a
     * server's aggregation, not an optimizer update); the heartbeat carries each stream's time in them */
    const int32_t *msg_sync;
} nic_plan;

#define ACK_LEN 62
#define CNP_LEN 74

/* Results, written by nic_run (arrays sized by the plan). */
typedef struct {
    int64_t start_ns, end_ns, clock_offset_ns;
    int32_t reason, _pad;   /* 0 complete, 1 terminated, 2 time_limit, 3 stalled, 4 error */
    int64_t messages_completed, messages_acknowledged;
    int64_t wakeups, late_wakeups, late_wakeup_ns, max_late_wakeup_ns;
    int64_t tx_records, rx_records, untimed_departures;
    char error[256];
    /* per message */
    int64_t *release_ns, *first_tx_ns, *last_tx_ns, *complete_ns, *acked_ns;
    int64_t *sent_packets, *recv_packets, *recv_bytes;
    /* per host: tx, rx, acks_tx, acks_rx, cnps_tx, cnps_rx, stray, icrc_errors, nic_full,
     * dry_ns (lead ran dry with work to send), dry_gaps, sent_bytes */
    int64_t *host_stats;
    /* per flow: retransmitted, naks, timeouts, out_of_order, duplicates, cnps, cuts,
     * behind_ns (a rate-limited QP behind its rate), limited_ns (time rate-limited);
     * and its final rate and alpha */
    int64_t *flow_stats;
    double *flow_rate;
    /* the delay line: frames that waited in it, and the most waiting at once */
    int64_t delayed_frames, delayed_max;
    int64_t clock_steps;   /* the wall clock stepped against the monotonic one (over 1 ms) */
} nic_result;

enum { HS_TX, HS_RX, HS_ACKS_TX, HS_ACKS_RX, HS_CNPS_TX, HS_CNPS_RX, HS_STRAY, HS_ICRC, HS_NIC_FULL,
       HS_DRY_NS, HS_DRY_GAPS, HS_SENT_BYTES, HS_N };
enum { FS_RETX, FS_NAKS, FS_TIMEOUTS, FS_OOO, FS_DUPS, FS_CNPS, FS_CUTS, FS_BEHIND_NS, FS_LIMITED_NS, FS_N };

/* Records: the layouts of testbed.records (TX, RX, QP_EVENT, NIC_GAP). */
#pragma pack(push, 1)
typedef struct { uint32_t msg, seq, psn; int64_t tx_ns, depart_ns; uint32_t frame_bytes; uint8_t flags, cls, _p[2]; } tx_rec;
typedef struct { uint32_t msg, seq; int64_t tx_ns, rx_ns; uint32_t frame_bytes; uint8_t ecn, accepted, dscp; uint32_t link_ns; uint8_t _p[1]; } rx_rec;
typedef struct { int64_t t_ns; uint32_t flow; uint8_t kind, _p[3]; uint64_t value; double rate, target, alpha; } qp_rec;
typedef struct { int64_t start_ns, end_ns; int32_t host, flow; uint8_t cls, kind, _p[6]; } gap_rec;
#pragma pack(pop)

enum { NAK_SENT, NAK_RECEIVED, GO_BACK_NAK, GO_BACK_TIMEOUT, CNP_SENT, CNP_RECEIVED };
/* a data frame the receiver dropped for its ICRC (value: message << 32 | sequence): whose frame a
 * corrupt fault's bit errors cost, so the loss account can name each one */
enum { ICRC_DROPPED = 10 };
enum { GAP_LEAD_DRY = 0, GAP_QP_BEHIND = 1 };

/* A frame handed to a NIC class, until its TX timestamp says it left. */
typedef struct { uint32_t msg, seq, psn, frame_bytes; int64_t tx_ns; uint8_t flags; } pending_tx;
#define PEND_BITS 14
#define PEND_SIZE (1 << PEND_BITS)

typedef struct {
    int fd;
    int32_t *flows, n_flows, rr;     /* the class's queue pairs, served round robin */
    int64_t queued_bytes;            /* handed over, not yet seen leaving */
    uint32_t next_key, done_key;     /* SOF_TIMESTAMPING_OPT_ID keys: next to send, next to leave */
    pending_tx *pend;
    int64_t last_depart_end_ns;      /* when the wire went idle after the last departure */
    int64_t work_since_ns;           /* the class has had frames to send since (0: none) */
    int serving;                     /* being topped up in this pass's rounds */
    int kicked;                      /* on the engine's list of empty classes that got work */
    int64_t backoff_until_ns;        /* the class's queue refused a frame (full: paused) */
    int64_t last_drain_ns;           /* departures last read, and the lead last topped up */
    int64_t qp_due_ns;               /* a rate-limited queue pair of the class may send then */
    struct mmsghdr mm[BATCH];
    struct iovec iov[BATCH][3];
    unsigned char hdr[BATCH][HDR_LEN];
    unsigned char icrc[BATCH][4];
    pending_tx batch_pend[BATCH];
    int n_batch;
} nic_class;

typedef struct {
    int rx_fd;
    double bw_bps;
    int64_t lead_bytes;              /* the lead kept in each of its NIC classes */
    nic_class cls[MAX_CLASSES];
    int n_cls_used;
    int32_t cls_used[MAX_CLASSES];
    /* control replies (ACK, NAK, CNP), sent after each receive batch */
    struct mmsghdr rmm[BATCH];
    struct iovec riov[BATCH];
    unsigned char rbuf[BATCH][CNP_LEN];
    int n_reply;
    unsigned char *ring;             /* PACKET_RX_RING */
    size_t ring_bytes;
    unsigned ring_frame, ring_frames, ring_idx;
    int64_t last_read_ns;            /* its ring last found empty: what is in it came since */
} host_t;

typedef struct {
    gbn_sender tx;
    gbn_receiver rx;
    dcqcn dc;
    int32_t *fifo, head, tail, cap;   /* released messages in order; [acked_at, head) sent */
    int32_t acked_at;                 /* oldest message not yet fully acknowledged */
    int64_t *start_psn;               /* per fifo slot: the PSN of the message's first packet */
    int64_t next_ns;                  /* DCQCN rate limiter: may send at this time */
    int64_t work_ns;                  /* when it last got something to send after having nothing */
    int64_t last_cnp_ns;
    int64_t wire_free_ns;             /* its last data frame's last bit in at the receiving NIC */
    int in_cc;
} flow_t;

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }
/* A stop asked for before nic_run took over the signals. */
void nic_request_stop(void) { stop_flag = 1; }

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static int64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CLOCK_REALTIME - CLOCK_MONOTONIC, read between two monotonic reads, keeping the tightest of a
 * few tries: a read the scheduler interrupted would be off by the interruption. */
/* How often the wall clock's offset from the monotonic one is measured again. The kernel stamps
 * received frames on the wall clock, and a VM's can step (2026-12-03: 1.5 s, then 12 s): frames
 * stamped after a step and converted with the offset from before it are off by the step, and the
 * delay line would hold them that long. 10 ms bounds the frames so affected to one short spell, at
 * 15 clock reads (under 1 us) a time. */
#define CLOCK_RESAMPLE_NS 10000000LL

static int64_t clock_offset(void) {
    int64_t best = NEVER, off = 0;
    for (int i = 0; i < 5; i++) {
        int64_t a = mono_ns(), r = real_ns(), b = mono_ns();
        if (b - a < best) { best = b - a; off = r - (a + (b - a) / 2); }
    }
    return off;
}

/* how far outside the span it must lie a stamp is taken for a stamp of the other side of a step */
#define STAMP_SLACK_NS 2000000LL

typedef struct {
    const nic_plan *P;
    nic_result *R;
    host_t *hosts;
    flow_t *flows;
    int64_t *msg_npkts;
    int32_t *waiting;
    /* compute timers: a binary heap of (done_ns, msg) */
    int64_t *heap_t;
    int32_t *heap_m;
    int n_heap;
    int64_t *stream_free_ns;   /* per compute stream: when its last step queued ends */
    int64_t *stream_sync_ns;   /* per compute stream: the time its weighed steps ran, those ended */
    int64_t start_ns;          /* the traffic's start: the first releases */
    FILE *ftx, *frx, *fqp, *fgap;
    /* classes that got frames to send while their NIC held none (host * MAX_CLASSES + class) */
    int32_t *kick;
    int n_kick;
    int64_t *ready_ns;   /* per message: its latest dependency's completion so far */
    int in_rounds, new_serving;
    int64_t beats;   /* heartbeats written: the count the runner watches change */
    struct qp_live *live;   /* [n_flows]: each queue pair's state, written with the heartbeat */
    int64_t *live_busy;     /* [n_streams]: each compute stream's weighed time, written with it */
    int64_t clock_off;   /* CLOCK_REALTIME - CLOCK_MONOTONIC, for the kernel's timestamps */
    int64_t prev_clock_off;   /* the one before it: stamps taken before a step */
    int64_t last_progress;
    int64_t completed, acked;
    int64_t net_bytes_done, net_bytes_total;   /* payload of network messages: done, planned */
    int32_t *cc_running;
    int n_cc_running;
    /* the delay line: frames received, held until their path's latency has passed (a min-heap by
     * due time; paths differ in length, so arrival order is not due order) */
    struct delayed *dl;
    int n_dl, cap_dl;
    int64_t delayed_total, delayed_max;
    /* the due times of delayed frames that end a message (SEND_LAST, SEND_ONLY), a min-heap: the
     * loop wakes for them within its batch, as it does for a doorbell, since messages wait on them
     * and a GPU would post its next send then (an entry may be stale: one wasted wake) */
    int64_t *ends;
    int n_ends, cap_ends;
    int64_t link_ns;     /* the frame being handled: from reaching the NIC to its last bit in */
} engine;

/* A received frame in the delay line: what the handlers read of it (headers and the payload
 * stamp; an ACK or CNP whole), its length on the wire, its queue pair (data; -1 for an ACK or CNP)
 * and its due time. A frame waits twice: until its path's latency has passed (it reaches the NIC,
 * wired 0), then until its last bit is in, a frame time at line rate after its queue pair's frame
 * before it (wired 1, wire_in); the second due time becomes its arrival time. With ICRC checking,
 * the check ran when it entered. */
#define DL_SNAP 80
struct delayed { int64_t due, reached; int32_t hi, len, wired, flow; unsigned char b[DL_SNAP]; };

static void heap_push(engine *E, int64_t t, int32_t m) {
    int i = E->n_heap++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (E->heap_t[p] <= t) break;
        E->heap_t[i] = E->heap_t[p]; E->heap_m[i] = E->heap_m[p];
        i = p;
    }
    E->heap_t[i] = t; E->heap_m[i] = m;
}

static void heap_pop(engine *E) {
    int n = --E->n_heap, i = 0;
    int64_t t = E->heap_t[n];
    int32_t m = E->heap_m[n];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && E->heap_t[c + 1] < E->heap_t[c]) c++;
        if (E->heap_t[c] >= t) break;
        E->heap_t[i] = E->heap_t[c]; E->heap_m[i] = E->heap_m[c];
        i = c;
    }
    E->heap_t[i] = t; E->heap_m[i] = m;
}

static void qp_event(engine *E, int64_t t, int flow, int kind, uint64_t value) {
    qp_rec r = {0};
    r.t_ns = t; r.flow = flow; r.kind = kind; r.value = value;
    if (E->P->cc) { dcqcn *d = &E->flows[flow].dc; r.rate = d->rate; r.target = d->target; r.alpha = d->alpha; }
    fwrite(&r, sizeof r, 1, E->fqp);
}

static void rate_changes(engine *E, int flow) {
    dcqcn *d = &E->flows[flow].dc;
    for (int i = 0; i < d->n_log; i++) {
        qp_rec r = {0};
        r.t_ns = d->log[i].t_ns; r.flow = flow; r.kind = d->log[i].kind;
        r.rate = d->log[i].rate; r.target = d->log[i].target; r.alpha = d->log[i].alpha;
        fwrite(&r, sizeof r, 1, E->fqp);
    }
    d->n_log = 0;
}

static void cc_watch(engine *E, int flow) {
    flow_t *f = &E->flows[flow];
    if (!f->in_cc && f->dc.running) { f->in_cc = 1; E->cc_running[E->n_cc_running++] = flow; }
}

/* Class ci of host hi has frames to send from now on; an empty one goes on the doorbell list. */
static void class_has_work(engine *E, int hi, int ci, int64_t now) {
    nic_class *c = &E->hosts[hi].cls[ci];
    if (!c->work_since_ns) c->work_since_ns = now;
    if (c->queued_bytes == 0 && c->n_batch == 0 && !c->kicked) {
        c->kicked = 1;
        E->kick[E->n_kick++] = hi * MAX_CLASSES + ci;
    }
}

static void release(engine *E, int32_t m, int64_t now);

/* A kernel timestamp (wall clock) of an event known to lie in [lo, hi] of the monotonic clock, on
 * the monotonic clock. The offset between the two is measured every CLOCK_RESAMPLE_NS, and a VM's
 * wall clock can step by seconds in between (2026-12-03: a frame's arrival was taken 1.25 s late,
 * the delay line held it that long, and go-back-N resent 274 frames nothing had lost). A stamp that
 * converts outside the span has the offset measured again, and one taken before the step converts
 * with the offset from before it; one that fits neither is kept as the latest offset gives it. */
static int in_span(int64_t t, int64_t lo, int64_t hi) {
    return t >= lo - STAMP_SLACK_NS && t <= hi + STAMP_SLACK_NS;
}

int64_t stamp_on_mono(int64_t real, int64_t lo, int64_t hi, int64_t off, int64_t prev_off) {
    int64_t t = real - off, before = real - prev_off;
    return in_span(t, lo, hi) || !in_span(before, lo, hi) ? t : before;
}

/* The offset measured again; a step (over 1 ms) keeps the one from before it for the stamps
 * taken before it, and is counted. */
static void measure_clock(engine *E) {
    int64_t off = clock_offset();
    if (llabs(off - E->clock_off) > 1000000) {
        E->prev_clock_off = E->clock_off;
        E->R->clock_steps++;
    }
    E->clock_off = off;
}

/* hi: a monotonic time at or after the event, read at most STAMP_SLACK_NS earlier than when it is
 * needed (the clock is read again only for a stamp that falls outside it). */
static int64_t to_mono(engine *E, int64_t real, int64_t lo, int64_t hi) {
    int64_t t = real - E->clock_off;
    if (in_span(t, lo, hi) || in_span(t, lo, mono_ns())) return t;
    measure_clock(E);
    return stamp_on_mono(real, lo, mono_ns(), E->clock_off, E->prev_clock_off);
}

/* The heartbeat file's record, rewritten in place: version, messages completed, acknowledged and
 * planned, network payload bytes done and planned, the beat's count, the traffic's start and the
 * beat's time (CLOCK_MONOTONIC). testbed.records.read_engine_progress reads it. After it, one
 * record a queue pair, rewritten with it: DCQCN's rate, target and alpha (0 without congestion
 * control), the PSNs acknowledged and sent so far, frames resent, CNPs and rate cuts
 * (testbed.records.read_qp_live: the northbound API's live queue pairs). After those, per compute
 * stream, the time its weighed compute steps have run up to the beat, then the beat's count again
 * (read_compute_busy: the API's live synchronisation share). */
struct qp_live { double rate, target, alpha; int64_t una, next, retransmitted, cnps, cuts; };

/* A stream's weighed compute time up to now: its ended steps', and the part run so far of the one
 * running (a stream runs one step at a time, so at most one of its steps in the heap began). */
static void sync_busy(engine *E, int64_t now, int64_t *busy) {
    const nic_plan *P = E->P;
    memcpy(busy, E->stream_sync_ns, (size_t)P->n_streams * sizeof *busy);
    for (int i = 0; i < E->n_heap; i++) {
        int32_t m = E->heap_m[i], st = P->msg_stream[m];
        int64_t began = E->R->first_tx_ns[m], end = E->heap_t[i];
        if (st >= 0 && P->msg_sync[m] && began < now) busy[st] += (end < now ? end : now) - began;
    }
}

static void beat(engine *E, int fd, int64_t messages) {
    int64_t now = mono_ns();
    int64_t rec[9] = {4, E->completed, E->acked, messages, E->net_bytes_done, E->net_bytes_total, ++E->beats,
                      E->start_ns, now};
    if (pwrite(fd, rec, sizeof rec, 0) != (ssize_t)sizeof rec) futimens(fd, NULL);
    if (!E->live) return;
    for (int i = 0; i < E->P->n_flows; i++) {
        const flow_t *f = &E->flows[i];
        int cc = E->P->cc;
        E->live[i] = (struct qp_live){cc ? f->dc.rate : 0, cc ? f->dc.target : 0, cc ? f->dc.alpha : 0,
                                      f->tx.una, f->tx.next, (int64_t)f->tx.retransmitted,
                                      cc ? (int64_t)f->dc.cnps : 0, cc ? (int64_t)f->dc.cuts : 0};
    }
    size_t n = (size_t)E->P->n_flows * sizeof *E->live;
    if (pwrite(fd, E->live, n, sizeof rec) != (ssize_t)n) return;   /* the header still beat */
    if (E->P->n_streams <= 0) return;
    /* ended by the beat's count: a reader that finds another than the header's read a torn pair */
    int64_t *busy = E->live_busy;
    sync_busy(E, now, busy);
    busy[E->P->n_streams] = E->beats;
    size_t nb = (size_t)(E->P->n_streams + 1) * sizeof *busy;
    if (pwrite(fd, busy, nb, (off_t)(sizeof rec + n)) != (ssize_t)nb) return;
}

static void complete(engine *E, int32_t m, int64_t t) {
    const nic_plan *P = E->P;
    E->R->complete_ns[m] = t;
    E->completed++;
    if (P->msg_flow[m] >= 0) E->net_bytes_done += P->msg_bytes[m];
    for (int i = P->dep_ptr[m]; i < P->dep_ptr[m + 1]; i++) {
        int32_t d = P->dep_idx[i];
        /* released when m completed (its last frame's kernel receive stamp, or its compute's
         * end), not when this loop noticed: a GPU posts the next send then, and the time the
         * data plane takes to react is its NIC idling with work to send */
        if (t > E->ready_ns[d]) E->ready_ns[d] = t;
        if (--E->waiting[d] == 0) {
            int64_t n = mono_ns();
            release(E, d, E->ready_ns[d] < n ? E->ready_ns[d] : n);
        }
    }
}

static void release(engine *E, int32_t m, int64_t now) {
    const nic_plan *P = E->P;
    E->R->release_ns[m] = now;
    int32_t flow = P->msg_flow[m];
    if (flow < 0) {
        int32_t st = P->msg_stream[m];
        int64_t start = now;
        if (st >= 0) {
            if (E->stream_free_ns[st] > start) start = E->stream_free_ns[st];
            E->stream_free_ns[st] = start + P->msg_duration_ns[m];
        }
        E->R->first_tx_ns[m] = start;   /* when its stream began it */
        heap_push(E, start + P->msg_duration_ns[m], m);
        return;
    }
    flow_t *f = &E->flows[flow];
    if (!gbn_resending(&f->tx) && f->head == f->tail) f->work_ns = now;
    f->fifo[f->tail++] = m;
    class_has_work(E, P->flow_src[flow], P->flow_cls[flow], now);
}

/* ---- sending ----------------------------------------------------------------------------- */

static int flow_has_work(engine *E, flow_t *f) { return gbn_resending(&f->tx) || f->head < f->tail; }

/* The fifo slot of the message holding PSN psn (it is in flight: between acked_at and head). */
static int32_t slot_of_psn(engine *E, flow_t *f, int64_t psn) {
    int32_t s = f->acked_at;
    while (s < f->head && psn >= f->start_psn[s] + E->msg_npkts[f->fifo[s]]) s++;
    return s;
}

static int flush_class(engine *E, host_t *h, int hi, nic_class *c, int64_t now);

/* Queue one frame of flow `flow` into class c's batch. Returns its frame length. */
static int stage_frame(engine *E, int flow, nic_class *c, int64_t now) {
    const nic_plan *P = E->P;
    flow_t *f = &E->flows[flow];
    int64_t psn;
    int32_t slot, seq, retx;
    if (gbn_resending(&f->tx)) {
        psn = f->tx.resend++;
        slot = slot_of_psn(E, f, psn);
        seq = (int32_t)(psn - f->start_psn[slot]);
        retx = 1;
    } else {
        slot = f->head;
        seq = (int32_t)E->R->sent_packets[f->fifo[slot]];
        if (seq == 0) f->start_psn[slot] = f->tx.next;
        psn = gbn_sent_new(&f->tx, now);
        retx = 0;
    }
    int32_t m = f->fifo[slot];
    int64_t npk = E->msg_npkts[m];
    int64_t rest = P->msg_bytes[m] - (int64_t)seq * P->payload_bytes;
    int plen = rest < P->payload_bytes ? (int)rest : P->payload_bytes;
    if (plen < STAMP_LEN) plen = STAMP_LEN;   /* short payloads are padded to the stamp */
    int op = npk == 1 ? OP_SEND_ONLY : seq == 0 ? OP_SEND_FIRST : seq == npk - 1 ? OP_SEND_LAST : OP_SEND_MIDDLE;
    int k = c->n_batch++;
    int64_t t = now;
    uint32_t crc = roce_data_frame(c->hdr[k], P->flow_prefix + (size_t)flow * PAYLOAD_OFF, op, psn,
                                   op == OP_SEND_LAST || op == OP_SEND_ONLY, (uint32_t)flow, (uint32_t)m,
                                   (uint32_t)seq, t, plen);
    c->icrc[k][0] = crc; c->icrc[k][1] = crc >> 8; c->icrc[k][2] = crc >> 16; c->icrc[k][3] = crc >> 24;
    int len = PAYLOAD_OFF + plen + ICRC_LEN;
    c->iov[k][0].iov_base = c->hdr[k]; c->iov[k][0].iov_len = HDR_LEN;
    c->iov[k][1].iov_base = zeros; c->iov[k][1].iov_len = plen - STAMP_LEN;
    c->iov[k][2].iov_base = c->icrc[k]; c->iov[k][2].iov_len = 4;
    memset(&c->mm[k], 0, sizeof c->mm[k]);
    c->mm[k].msg_hdr.msg_iov = c->iov[k];
    c->mm[k].msg_hdr.msg_iovlen = 3;
    pending_tx *pt = &c->batch_pend[k];
    pt->msg = m; pt->seq = seq; pt->psn = (uint32_t)(psn & 0xFFFFFF); pt->frame_bytes = len; pt->tx_ns = t;
    pt->flags = retx;
    /* state moves now; a frame the kernel refuses is undone in flush_class */
    if (!retx) {
        int64_t s1 = seq + 1;
        E->R->sent_packets[m] = s1;
        if (seq == 0) E->R->first_tx_ns[m] = t;
        if (s1 == npk) { E->R->last_tx_ns[m] = t; f->head++; }
    }
    if (P->cc) {
        dcqcn *d = &f->dc;
        if (d->rate < d->p.line_bps * (1 - 1e-9)) {
            /* the rate limiter: at most one gap of credit after a late start. Behind its rate
             * from a gap past its time, or from when it got something to send if it had nothing
             * then: a QP idle between its messages is not late (2026-12-06: on an all-to-all with
             * DCQCN, 84% of the time counted behind was such idling, and the run's hosts judged
             * slow for it) */
            int64_t gap = (int64_t)(len * 8e9 / d->rate);
            int64_t due = f->next_ns + gap;
            if (f->work_ns > due) due = f->work_ns;
            if (f->next_ns && now > due) {
                int64_t behind = now - due;
                E->R->flow_stats[flow * FS_N + FS_BEHIND_NS] += behind;
                gap_rec g = {0};
                g.start_ns = due; g.end_ns = now; g.host = P->flow_src[flow]; g.flow = flow;
                g.cls = P->flow_cls[flow]; g.kind = GAP_QP_BEHIND;
                fwrite(&g, sizeof g, 1, E->fgap);
            }
            int64_t base = f->next_ns > now - gap ? f->next_ns : now - gap;
            f->next_ns = base + gap;
            E->R->flow_stats[flow * FS_N + FS_LIMITED_NS] += gap;
        } else {
            f->next_ns = 0;
        }
        if (d->running) { dcqcn_sent(d, len, t); if (d->n_log) rate_changes(E, flow); }
    }
    return len;
}

static void undo_frame(engine *E, int flow, pending_tx *pt) {
    /* the kernel refused the frame (its class queue is full): put the QP back where it was */
    flow_t *f = &E->flows[flow];
    if (pt->flags) { f->tx.resend--; return; }
    f->tx.next--;
    int32_t m = pt->msg;
    if (E->R->sent_packets[m] == E->msg_npkts[m]) f->head--;
    E->R->sent_packets[m] = pt->seq;
    if (pt->seq == 0) { E->R->first_tx_ns[m] = 0; }
    E->R->last_tx_ns[m] = 0;
}

static int32_t flow_of_pending(engine *E, pending_tx *pt) { return E->P->msg_flow[pt->msg]; }

static int flush_class(engine *E, host_t *h, int hi, nic_class *c, int64_t now) {
    int done = 0, refused = 0;
    while (done < c->n_batch) {
        int n = sendmmsg(c->fd, c->mm + done, c->n_batch - done, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == ENOBUFS || errno == EAGAIN) { refused = 1; break; }
            if (errno == EINTR) continue;
            snprintf(E->R->error, sizeof E->R->error, "host %d: sending failed: %s", hi, strerror(errno));
            return -1;
        }
        for (int i = done; i < done + n; i++) {
            pending_tx *pt = &c->batch_pend[i];
            c->pend[c->next_key & (PEND_SIZE - 1)] = *pt;
            c->next_key++;
            c->queued_bytes += pt->frame_bytes;
            E->R->host_stats[hi * HS_N + HS_TX]++;
            E->R->host_stats[hi * HS_N + HS_SENT_BYTES] += pt->frame_bytes;
        }
        done += n;
    }
    if (refused) {
        /* ENOBUFS: the qdisc dropped the frame, and with it its timestamp key */
        if (errno == ENOBUFS) c->next_key++;
        E->R->host_stats[hi * HS_N + HS_NIC_FULL]++;
        for (int i = c->n_batch - 1; i >= done; i--) undo_frame(E, flow_of_pending(E, &c->batch_pend[i]), &c->batch_pend[i]);
        c->backoff_until_ns = now + 50000;
    }
    c->n_batch = 0;
    return 0;
}

/* Fill class c of host h up to its lead; returns the earliest time a rate-limited QP of it may
 * send (NEVER if none waits), or -1 on error. */
static int64_t fill_class(engine *E, host_t *h, int hi, nic_class *c, int64_t now, int64_t cap_bytes,
                          int *capped) {
    const nic_plan *P = E->P;
    int64_t wake = NEVER, staged = 0;
    *capped = 0;
    if (c->backoff_until_ns > now) return c->backoff_until_ns;
    int any_work = 0;
    for (;;) {
        /* the lead is full (or as many frames await their departure stamp as their table holds),
         * or this round's share is handed over and the rest comes in the pass's next round: is
         * there more to send behind it? */
        int full = c->queued_bytes + staged >= h->lead_bytes ||
                   c->next_key - c->done_key + (uint32_t)c->n_batch >= PEND_SIZE - BATCH;
        if (full || c->queued_bytes + staged >= cap_bytes) {
            for (int i = 0; i < c->n_flows && !any_work; i++) any_work = flow_has_work(E, &E->flows[c->flows[i]]);
            *capped = !full && any_work;
            break;
        }
        int picked = -1;
        for (int i = 0; i < c->n_flows; i++) {
            int flow = c->flows[(c->rr + i) % c->n_flows];
            flow_t *f = &E->flows[flow];
            if (!flow_has_work(E, f)) continue;
            any_work = 1;
            if (P->cc && f->next_ns > now) { if (f->next_ns < wake) wake = f->next_ns; continue; }
            picked = flow;
            c->rr = (c->rr + i + 1) % c->n_flows;
            break;
        }
        if (picked < 0) break;
        if (c->queued_bytes == 0 && staged == 0 && c->work_since_ns && c->last_depart_end_ns &&
            !(P->cc && E->flows[picked].dc.rate < E->flows[picked].dc.p.line_bps * (1 - 1e-9))) {
            /* the NIC's queue ran dry while it had frames to send: the wire idled (a QP that its
             * DCQCN rate holds back builds no lead: its lateness is counted in stage_frame) */
            int64_t from = c->last_depart_end_ns > c->work_since_ns ? c->last_depart_end_ns : c->work_since_ns;
            if (now - from > DRY_MIN_NS) {
                E->R->host_stats[hi * HS_N + HS_DRY_NS] += now - from;
                E->R->host_stats[hi * HS_N + HS_DRY_GAPS]++;
                gap_rec g = {0};
                g.start_ns = from; g.end_ns = now; g.host = hi; g.flow = -1; g.cls = (uint8_t)(c - h->cls);
                g.kind = GAP_LEAD_DRY;
                fwrite(&g, sizeof g, 1, E->fgap);
            }
        }
        staged += stage_frame(E, picked, c, now);
        if (c->n_batch == BATCH) {
            if (flush_class(E, h, hi, c, now) < 0) return -1;
            staged = 0;
            if (c->backoff_until_ns > now) return c->backoff_until_ns;
        }
    }
    if (c->n_batch && flush_class(E, h, hi, c, now) < 0) return -1;
    if (!any_work) c->work_since_ns = 0;
    else if (!c->work_since_ns) c->work_since_ns = now;
    return wake;
}

/* ---- departures: TX timestamps from each class socket's error queue ------------------------ */

/* A frame leaves the NIC's table: its record (depart_ns -1 when its departure was never seen:
 * dropped after the qdisc took it, or still queued at the end), and its bytes off the lead. */
static void retire(engine *E, host_t *h, nic_class *c, pending_tx *pt, int64_t dep) {
    tx_rec r = {pt->msg, pt->seq, pt->psn, pt->tx_ns, dep, pt->frame_bytes, pt->flags, (uint8_t)(c - h->cls), {0, 0}};
    fwrite(&r, sizeof r, 1, E->ftx);
    E->R->tx_records++;
    c->queued_bytes -= pt->frame_bytes;
    if (dep < 0) E->R->untimed_departures++;
    else c->last_depart_end_ns = dep + (int64_t)(pt->frame_bytes * 8e9 / h->bw_bps);
    pt->frame_bytes = 0;
}

static int drain_departures(engine *E, host_t *h, int hi, nic_class *c) {
    struct mmsghdr mm[BATCH];
    char ctrl[BATCH][256];
    unsigned char data[BATCH][64];
    struct iovec iov[BATCH];
    for (;;) {
        for (int i = 0; i < BATCH; i++) {
            iov[i].iov_base = data[i]; iov[i].iov_len = sizeof data[i];
            memset(&mm[i].msg_hdr, 0, sizeof mm[i].msg_hdr);
            mm[i].msg_hdr.msg_iov = &iov[i]; mm[i].msg_hdr.msg_iovlen = 1;
            mm[i].msg_hdr.msg_control = ctrl[i]; mm[i].msg_hdr.msg_controllen = sizeof ctrl[i];
        }
        int n = recvmmsg(c->fd, mm, BATCH, MSG_ERRQUEUE | MSG_DONTWAIT, NULL);
        int64_t now = mono_ns();   /* every stamp read is of a departure before it */
        if (n <= 0) {
            if (n < 0 && errno != EAGAIN && errno != EINTR) {
                snprintf(E->R->error, sizeof E->R->error, "host %d: reading TX timestamps failed: %s", hi, strerror(errno));
                return -1;
            }
            return 0;
        }
        for (int i = 0; i < n; i++) {
            int64_t ts = -1;
            struct sock_extended_err *ee = NULL;
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mm[i].msg_hdr); cm; cm = CMSG_NXTHDR(&mm[i].msg_hdr, cm)) {
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPING) {
                    struct timespec *t = (struct timespec *)CMSG_DATA(cm);
                    ts = t[0].tv_sec * 1000000000LL + t[0].tv_nsec;
                } else if (cm->cmsg_level == SOL_PACKET && cm->cmsg_type == PACKET_TX_TIMESTAMP) {
                    ee = (struct sock_extended_err *)CMSG_DATA(cm);
                }
            }
            if (!ee || ee->ee_origin != SO_EE_ORIGIN_TIMESTAMPING || ts < 0) continue;
            uint32_t key = ee->ee_data;
            /* keys of frames the qdisc dropped never come back; everything before `key` left or died */
            while ((int32_t)(key - c->done_key) > 0) {
                pending_tx *lost = &c->pend[c->done_key & (PEND_SIZE - 1)];
                if ((int32_t)(c->next_key - c->done_key) <= 0) break;
                if (lost->frame_bytes) retire(E, h, c, lost, -1);
                c->done_key++;
            }
            if (key != c->done_key) continue;  /* a stale key */
            pending_tx *p = &c->pend[key & (PEND_SIZE - 1)];
            retire(E, h, c, p, to_mono(E, ts, p->tx_ns, now));
            c->done_key++;
        }
        if (n < BATCH) return 0;
    }
}

/* ---- receiving ----------------------------------------------------------------------------- */

static void reply(engine *E, host_t *h, const unsigned char *frame, int len) {
    if (h->n_reply == BATCH) return;   /* flushed every batch of BATCH receives: cannot happen */
    int k = h->n_reply++;
    memcpy(h->rbuf[k], frame, len);
    h->riov[k].iov_base = h->rbuf[k]; h->riov[k].iov_len = len;
    memset(&h->rmm[k], 0, sizeof h->rmm[k]);
    h->rmm[k].msg_hdr.msg_iov = &h->riov[k]; h->rmm[k].msg_hdr.msg_iovlen = 1;
}

static int flush_replies(engine *E, host_t *h, int hi) {
    int done = 0;
    while (done < h->n_reply) {
        int n = sendmmsg(h->rx_fd, h->rmm + done, h->n_reply - done, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == ENOBUFS || errno == EAGAIN) {
                /* a lost ACK is covered by a later one or the RTO, a lost NAK or CNP by the RTO */
                E->R->host_stats[hi * HS_N + HS_NIC_FULL] += h->n_reply - done;
                break;
            }
            snprintf(E->R->error, sizeof E->R->error, "host %d: sending a reply failed: %s", hi, strerror(errno));
            return -1;
        }
        done += n;
    }
    h->n_reply = 0;
    return 0;
}

static int64_t flow_of_reply(engine *E, const unsigned char *f, int hi) {
    int64_t flow = (int64_t)(get32(f + BTH_OFF + 4) & 0xFFFFFF) - QPN_BASE;
    if (flow < 0 || flow >= E->P->n_flows || E->P->flow_src[flow] != hi) {
        E->R->host_stats[hi * HS_N + HS_STRAY]++;
        return -1;
    }
    return flow;
}

/* The oldest messages of a QP whose every PSN is now below una are acknowledged: the work
 * completion a RoCE application waits for. */
static void acked_upto(engine *E, flow_t *f, int64_t una, int64_t now) {
    while (f->acked_at < f->tail && f->start_psn[f->acked_at] >= 0) {
        int32_t m = f->fifo[f->acked_at];
        if (f->start_psn[f->acked_at] + E->msg_npkts[m] > una) break;
        E->R->acked_ns[m] = now;
        E->acked++;
        f->acked_at++;
    }
}

static void on_ack(engine *E, host_t *h, int hi, const unsigned char *b, int64_t now) {
    int64_t flow = flow_of_reply(E, b, hi);
    if (flow < 0) return;
    E->R->host_stats[hi * HS_N + HS_ACKS_RX]++;
    flow_t *f = &E->flows[flow];
    int64_t psn = get32(b + PSN_OFF) & 0xFFFFFF;
    int syndrome = b[PAYLOAD_OFF];
    int64_t una0 = f->tx.una;
    if (syndrome == AETH_ACK) {
        gbn_acked(&f->tx, psn, now);
    } else {
        uint64_t before = f->tx.retransmitted;
        if (!flow_has_work(E, f)) f->work_ns = now;   /* a go-back it had nothing before */
        gbn_nacked(&f->tx, psn, now);
        qp_event(E, now, (int)flow, NAK_RECEIVED, (uint64_t)psn);
        if (f->tx.retransmitted != before) qp_event(E, now, (int)flow, GO_BACK_NAK, f->tx.retransmitted - before);
        E->R->flow_stats[flow * FS_N + FS_NAKS] = (int64_t)f->tx.naks;
    }
    if (f->tx.una != una0) { acked_upto(E, f, f->tx.una, now); E->last_progress = now; }
    if (gbn_resending(&f->tx)) class_has_work(E, hi, E->P->flow_cls[flow], now);
    (void)h;
}

static void on_cnp(engine *E, host_t *h, int hi, const unsigned char *b, int64_t now) {
    int64_t flow = flow_of_reply(E, b, hi);
    if (flow < 0) return;
    E->R->host_stats[hi * HS_N + HS_CNPS_RX]++;
    if (!E->P->cc) return;
    dcqcn *d = &E->flows[flow].dc;
    dcqcn_cnp(d, now);
    qp_event(E, now, (int)flow, CNP_RECEIVED, 0);
    rate_changes(E, (int)flow);
    cc_watch(E, (int)flow);
    (void)h;
}

static void on_data(engine *E, host_t *h, int hi, unsigned char *b, int n, int64_t rx, int64_t now, int checked) {
    const nic_plan *P = E->P;
    int opcode = b[BTH_OFF];
    uint32_t magic = get32(b + PAYLOAD_OFF), flow = get32(b + PAYLOAD_OFF + 4);
    uint32_t msg = get32(b + PAYLOAD_OFF + 8), seq = get32(b + PAYLOAD_OFF + 12);
    int64_t tx = (int64_t)get64(b + PAYLOAD_OFF + 16);
    if (!(opcode == OP_SEND_FIRST || opcode == OP_SEND_MIDDLE || opcode == OP_SEND_LAST || opcode == OP_SEND_ONLY) ||
        magic != PAYLOAD_MAGIC || msg >= (uint32_t)P->n_msgs || P->msg_flow[msg] != (int32_t)flow ||
        P->flow_dst[flow] != hi || n < HDR_LEN + ICRC_LEN) {
        E->R->host_stats[hi * HS_N + HS_STRAY]++;
        return;
    }
    if (P->verify_icrc && !checked && !icrc_ok(b, n)) {
        E->R->host_stats[hi * HS_N + HS_ICRC]++;   /* a RoCE NIC drops it silently; go-back-N recovers */
        qp_event(E, rx, (int)flow, ICRC_DROPPED, (uint64_t)msg << 32 | seq);
        return;
    }
    E->R->host_stats[hi * HS_N + HS_RX]++;
    flow_t *f = &E->flows[flow];
    int ecn = b[IP_OFF + 1] & 3;
    if (ecn == 3 && P->cc && rx - f->last_cnp_ns >= f->dc.p.cnp_interval_ns) {
        f->last_cnp_ns = rx;
        reply(E, h, P->flow_cnp + (size_t)flow * CNP_LEN, CNP_LEN);
        E->R->host_stats[hi * HS_N + HS_CNPS_TX]++;
        qp_event(E, rx, (int)flow, CNP_SENT, 0);
    }
    int last = (int64_t)seq == E->msg_npkts[msg] - 1;
    int accepted = 1;
    if (P->reliable) {
        int32_t syn;
        int64_t rpsn;
        accepted = gbn_received(&f->rx, get32(b + PSN_OFF) & 0xFFFFFF, last, rx, &syn, &rpsn);
        if (syn) {
            unsigned char a[ACK_LEN];
            memcpy(a, P->flow_ack + (size_t)flow * ACK_LEN, ACK_LEN);
            put32(a + PSN_OFF, (uint32_t)(rpsn & 0xFFFFFF));
            put32(a + PAYLOAD_OFF, ((uint32_t)syn << 24) | ((uint32_t)E->R->recv_packets[msg] & 0xFFFFFF));
            uint32_t c = roce_icrc(a, ACK_LEN);
            a[ACK_LEN - 4] = c; a[ACK_LEN - 3] = c >> 8; a[ACK_LEN - 2] = c >> 16; a[ACK_LEN - 1] = c >> 24;
            reply(E, h, a, ACK_LEN);
            E->R->host_stats[hi * HS_N + HS_ACKS_TX]++;
            if (syn == AETH_NAK_SEQ) qp_event(E, rx, (int)flow, NAK_SENT, (uint64_t)rpsn);
        }
    }
    rx_rec r = {msg, seq, tx, rx, (uint32_t)n, (uint8_t)ecn, (uint8_t)accepted, (uint8_t)(b[IP_OFF + 1] >> 2),
                E->link_ns < 0 ? 0 : E->link_ns > UINT32_MAX ? UINT32_MAX : (uint32_t)E->link_ns, {0}};
    fwrite(&r, sizeof r, 1, E->frx);
    E->R->rx_records++;
    if (!accepted) return;
    int64_t got = ++E->R->recv_packets[msg];
    int64_t payload = n - HEADER_BYTES, left = P->msg_bytes[msg] - (int64_t)seq * P->payload_bytes;
    E->R->recv_bytes[msg] += payload < left ? payload : left;
    E->last_progress = now;
    if (got == E->msg_npkts[msg]) complete(E, (int32_t)msg, rx);
}

/* Every frame waiting in host h's receive ring (PACKET_RX_RING, TPACKET_V2): the kernel copied
 * each frame's first ring_snap bytes there in its softirq, with its receive time, so reading
 * takes no system call. */
static int serve_kicks(engine *E);

static void dispatch(engine *E, host_t *h, int hi, unsigned char *b, int len, int64_t rx, int64_t now,
                     int checked) {
    int op = b[BTH_OFF];
    if (op == OP_ACK && len >= ACK_LEN) on_ack(E, h, hi, b, now);
    else if (op == OP_CNP) on_cnp(E, h, hi, b, now);
    else on_data(E, h, hi, b, len, rx, now, checked);
}

/* The path latency a received frame still owes: its flow's (data carries the flow in its stamp,
 * ACKs, NAKs and CNPs in their QPN); -1 for a frame no flow claims (the handlers count it). */
static int64_t frame_delay(engine *E, const unsigned char *b, int len, int hi, int32_t *data_flow) {
    const nic_plan *P = E->P;
    *data_flow = -1;
    int op = b[BTH_OFF];
    int64_t flow;
    if (op == OP_ACK || op == OP_CNP) {
        flow = (int64_t)(get32(b + BTH_OFF + 4) & 0xFFFFFF) - QPN_BASE;
        if (flow < 0 || flow >= P->n_flows || P->flow_src[flow] != hi) return -1;
    } else {
        if (len < HDR_LEN) return -1;
        flow = get32(b + PAYLOAD_OFF + 4);
        if (flow >= P->n_flows || P->flow_dst[flow] != hi) return -1;
        *data_flow = (int32_t)flow;
    }
    return P->flow_delay_ns ? P->flow_delay_ns[flow] : 0;
}

static void dl_insert(engine *E, const struct delayed *d) {
    if (E->n_dl == E->cap_dl) {
        int cap = E->cap_dl ? 2 * E->cap_dl : 1024;
        struct delayed *dl = realloc(E->dl, (size_t)cap * sizeof *dl);
        if (!dl) { E->R->host_stats[d->hi * HS_N + HS_STRAY]++; return; }   /* no memory: the frame is lost */
        E->dl = dl; E->cap_dl = cap;
    }
    int i = E->n_dl++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (E->dl[p].due <= d->due) break;
        E->dl[i] = E->dl[p];
        i = p;
    }
    E->dl[i] = *d;
    if (E->n_dl > E->delayed_max) E->delayed_max = E->n_dl;
}

static void ends_push(engine *E, int64_t due) {
    if (E->n_ends == E->cap_ends) {
        int cap = E->cap_ends ? 2 * E->cap_ends : 256;
        int64_t *e = realloc(E->ends, (size_t)cap * sizeof *e);
        if (!e) return;   /* no memory: the frame is still acted on, at the batch's end */
        E->ends = e; E->cap_ends = cap;
    }
    int i = E->n_ends++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (E->ends[p] <= due) break;
        E->ends[i] = E->ends[p];
        i = p;
    }
    E->ends[i] = due;
}

/* The message ends due by now, forgotten: they are in the delay line's hands. */
static void ends_pop_due(engine *E, int64_t now) {
    while (E->n_ends && E->ends[0] <= now) {
        int n = --E->n_ends, i = 0;
        int64_t last = E->ends[n];
        for (;;) {
            int c = 2 * i + 1;
            if (c >= n) break;
            if (c + 1 < n && E->ends[c + 1] < E->ends[c]) c++;
            if (E->ends[c] >= last) break;
            E->ends[i] = E->ends[c];
            i = c;
        }
        E->ends[i] = last;
    }
}

static int ends_message(const unsigned char *b) { return b[BTH_OFF] == OP_SEND_LAST || b[BTH_OFF] == OP_SEND_ONLY; }

static void dl_push(engine *E, int hi, const unsigned char *b, int len, int64_t due, int32_t flow) {
    struct delayed d;
    d.due = d.reached = due; d.hi = hi; d.len = len; d.wired = 0; d.flow = flow;
    memcpy(d.b, b, len < DL_SNAP ? len : DL_SNAP);
    dl_insert(E, &d);
    if (flow >= 0 && ends_message(b)) ends_push(E, due);
    E->delayed_total++;
}

static void dl_pop(engine *E) {
    int n = --E->n_dl, i = 0;
    struct delayed last = E->dl[n];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && E->dl[c + 1].due < E->dl[c].due) c++;
        if (E->dl[c].due >= last.due) break;
        E->dl[i] = E->dl[c];
        i = c;
    }
    E->dl[i] = last;
}

/* A data frame of a queue pair that reached host hi's NIC at t: when its last bit is in. On
 * hardware a queue pair's frames are a frame time apart on every link, and a frame's last bit comes
 * a frame time after its first. The host NIC's shaper releases two frames back to back after an idle
 * spell (there to let a late timer catch up), and a veth takes no time per frame: here each frame
 * takes its frame time at the NIC's line rate, after the queue pair's frame before it, so a transfer
 * of n frames takes n frame times plus its path's latency, as on hardware (docs/dilation.md). ACKs
 * and CNPs are not held. Frames of different queue pairs are not spaced against one another: a
 * switch port's bucket still lets them in faster than line rate after an idle spell. */
static int64_t wire_in(engine *E, int hi, int32_t flow, int len, int64_t t) {
    host_t *h = &E->hosts[hi];
    if (flow < 0 || h->bw_bps <= 0) return t;
    flow_t *f = &E->flows[flow];
    int64_t start = t > f->wire_free_ns ? t : f->wire_free_ns;
    f->wire_free_ns = start + (int64_t)(len * 8e9 / h->bw_bps);
    return f->wire_free_ns;
}

/* The delayed frames due by limit, acted on as if they arrived at their due time (now: the
 * handlers' clock). */
static int release_delayed(engine *E, int64_t limit, int64_t now) {
    int served = 0;
    while (E->n_dl && E->dl[0].due <= limit) {
        struct delayed d = E->dl[0];
        dl_pop(E);
        if (!d.wired) {
            /* back in line by its new due time even when that has passed too: frames wired
             * before it may still be waiting, and a queue pair must not be reordered */
            d.due = wire_in(E, d.hi, d.flow, d.len, d.due);
            d.wired = 1;
            dl_insert(E, &d);
            if (d.flow >= 0 && ends_message(d.b)) ends_push(E, d.due);
            continue;
        }
        host_t *h = &E->hosts[d.hi];
        E->link_ns = d.due - d.reached;
        dispatch(E, h, d.hi, d.b, d.len, d.due, now, 1);
        if (h->n_reply == BATCH && flush_replies(E, h, d.hi) < 0) return -1;
        served++;
    }
    if (!served) return 0;
    if (serve_kicks(E) < 0) return -1;
    for (int i = 0; i < E->P->n_hosts; i++)
        if (E->hosts[i].n_reply && flush_replies(E, &E->hosts[i], i) < 0) return -1;
    return served;
}

static int receive(engine *E, host_t *h, int hi, int64_t now) {
    int served = 0;
    for (;;) {
        struct tpacket2_hdr *t = (struct tpacket2_hdr *)(h->ring + (size_t)h->ring_idx * h->ring_frame);
        if (!(__atomic_load_n(&t->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) {
            h->last_read_ns = mono_ns();
            break;
        }
        unsigned char *b = (unsigned char *)t + t->tp_mac;
        int len = (int)t->tp_len;
        int64_t rx = to_mono(E, (int64_t)t->tp_sec * 1000000000LL + t->tp_nsec, h->last_read_ns, now);
        if ((int)t->tp_snaplen < (len < HDR_LEN ? len : HDR_LEN) ||
            (E->P->verify_icrc && (int)t->tp_snaplen < len) || len < BTH_OFF + 12) {
            E->R->host_stats[hi * HS_N + HS_STRAY]++;
        } else {
            int32_t flow;
            int64_t delay = frame_delay(E, b, len, hi, &flow);
            int data = b[BTH_OFF] != OP_ACK && b[BTH_OFF] != OP_CNP;
            if (delay >= 0) {
                /* a RoCE NIC drops a corrupt frame on arrival: checked before it waits. A frame
                 * found due already (a pass came late) still goes into the line behind the frames
                 * that reached the NIC first: released below, in due order, so a late pass does
                 * not reorder a queue pair and set off go-back-N */
                if (data && E->P->verify_icrc && len >= HDR_LEN + ICRC_LEN && !icrc_ok(b, len)) {
                    E->R->host_stats[hi * HS_N + HS_ICRC]++;
                    qp_event(E, rx, flow, ICRC_DROPPED,
                             (uint64_t)get32(b + PAYLOAD_OFF + 8) << 32 | get32(b + PAYLOAD_OFF + 12));
                } else
                    dl_push(E, hi, b, len, rx + delay, flow);
            } else {
                E->link_ns = 0;
                dispatch(E, h, hi, b, len, rx, now, 0);   /* no flow claims it: the handlers count it */
            }
        }
        __atomic_store_n(&t->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        h->ring_idx = (h->ring_idx + 1) % h->ring_frames;
        if (h->n_reply == BATCH && flush_replies(E, h, hi) < 0) return -1;
        served++;
    }
    if (E->n_dl && E->dl[0].due <= now && release_delayed(E, now, now) < 0) return -1;
    /* the NICs that the arrivals gave work start before this host's replies go out */
    if (serve_kicks(E) < 0) return -1;
    if (h->n_reply && flush_replies(E, h, hi) < 0) return -1;
    return served;
}

/* The receive ring of one host's socket: frames of ring_frame bytes, each holding the frame's
 * headers (or all of it, when the ICRC is checked). */
static int setup_ring(host_t *h, int verify_icrc, char *err, size_t errlen) {
    int v = TPACKET_V2;
    if (setsockopt(h->rx_fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) < 0) {
        snprintf(err, errlen, "PACKET_VERSION TPACKET_V2: %s", strerror(errno));
        return -1;
    }
    /* a frame slot holds TPACKET2_HDRLEN, the MAC offset's headroom and the snap; slots divide the
     * 1 MiB blocks exactly (else PACKET_RX_RING refuses the ring) */
    unsigned frame = verify_icrc ? 16384 : 512;
    unsigned frames = verify_icrc ? 256 : 2048;
    struct tpacket_req req = {.tp_block_size = 1 << 20, .tp_frame_size = frame,
                              .tp_block_nr = (frame * frames) >> 20, .tp_frame_nr = frames};
    if (setsockopt(h->rx_fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) < 0) {
        snprintf(err, errlen, "PACKET_RX_RING: %s", strerror(errno));
        return -1;
    }
    h->ring_bytes = (size_t)req.tp_block_size * req.tp_block_nr;
    h->ring = mmap(NULL, h->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, h->rx_fd, 0);
    if (h->ring == MAP_FAILED) {
        h->ring = NULL;
        snprintf(err, errlen, "mmap of the receive ring: %s", strerror(errno));
        return -1;
    }
    h->ring_frame = frame;
    h->ring_frames = frames;
    h->ring_idx = 0;
    return 0;
}

/* ---- the loop ------------------------------------------------------------------------------ */

static void check_timeouts(engine *E, int64_t now) {
    for (int i = 0; i < E->P->n_flows; i++) {
        flow_t *f = &E->flows[i];
        int idle = !flow_has_work(E, f);
        if (f->tx.una != f->tx.next && gbn_timed_out(&f->tx, now, E->P->rto_ns)) {
            if (idle) f->work_ns = now;
            qp_event(E, now, i, GO_BACK_TIMEOUT, (uint64_t)(f->tx.resend_end - f->tx.resend));
            class_has_work(E, E->P->flow_src[i], E->P->flow_cls[i], now);
        }
    }
}

/* The doorbell: each class on the list gets one frame at once, so that its wire starts while the
 * pass goes on (the pass's rounds top it up). A real NIC starts within microseconds of having
 * work; this one thread serves every NIC, and a pass took 40-230 us from a message's release to
 * its first frame (8 hosts of a ring, measured) when the NICs were served only in the pass. */
static int serve_kicks(engine *E) {
    int64_t frame = HDR_LEN + E->P->payload_bytes;   /* the largest */
    for (int i = 0; i < E->n_kick; i++) {
        int hi = E->kick[i] / MAX_CLASSES;
        host_t *h = &E->hosts[hi];
        nic_class *c = &h->cls[E->kick[i] % MAX_CLASSES];
        c->kicked = 0;
        int64_t now = mono_ns();
        if (c->next_key != c->done_key && drain_departures(E, h, hi, c) < 0) return -1;
        if (c->queued_bytes) continue;
        int capped;
        int64_t w = fill_class(E, h, hi, c, now, frame, &capped);
        if (w < 0) return -1;
        if (w < c->qp_due_ns) c->qp_due_ns = w;
        /* a class that starts during the pass's rounds is topped up in them */
        if (E->in_rounds && capped && !c->serving) { c->serving = 1; E->new_serving = 1; }
    }
    E->n_kick = 0;
    return 0;
}

static void run_rate_timers(engine *E, int64_t now) {
    int w = 0;
    for (int i = 0; i < E->n_cc_running; i++) {
        int flow = E->cc_running[i];
        flow_t *f = &E->flows[flow];
        dcqcn_advance(&f->dc, now);
        if (f->dc.n_log) rate_changes(E, flow);
        if (f->dc.running) E->cc_running[w++] = flow;
        else f->in_cc = 0;
    }
    E->n_cc_running = w;
}

/* Read every copy queued on a doorbell socket (only their arrival matters). */
static void drain_door(int fd) {
    struct mmsghdr mm[BATCH];
    struct iovec iov[BATCH];
    unsigned char b[BATCH][1];
    for (int i = 0; i < BATCH; i++) {
        iov[i].iov_base = b[i]; iov[i].iov_len = 1;
        memset(&mm[i].msg_hdr, 0, sizeof mm[i].msg_hdr);
        mm[i].msg_hdr.msg_iov = &iov[i]; mm[i].msg_hdr.msg_iovlen = 1;
    }
    while (recvmmsg(fd, mm, BATCH, MSG_DONTWAIT | MSG_TRUNC, NULL) == BATCH) {}
}

/* The compute steps that have ended by now: complete (and acknowledged: there is no wire). */
static void end_computes(engine *E, int64_t now) {
    while (E->n_heap && E->heap_t[0] <= now) {
        int64_t t = E->heap_t[0];
        int32_t m = E->heap_m[0];
        heap_pop(E);
        E->R->acked_ns[m] = t;
        E->acked++;
        E->last_progress = now;
        int32_t st = E->P->msg_stream[m];
        if (st >= 0 && E->P->msg_sync[m]) E->stream_sync_ns[st] += t - E->R->first_tx_ns[m];
        complete(E, m, t);
    }
}

/* Between two NICs' turns in a pass: the frames waiting in any host's receive ring (one load
 * per host to know; no system call) and the compute steps that have ended. */
static int between_turns(engine *E) {
    for (int i = 0; i < E->P->n_hosts; i++) {
        host_t *h = &E->hosts[i];
        struct tpacket2_hdr *t = (struct tpacket2_hdr *)(h->ring + (size_t)h->ring_idx * h->ring_frame);
        if ((__atomic_load_n(&t->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) && receive(E, h, i, mono_ns()) < 0)
            return -1;
    }
    if (E->n_heap && E->heap_t[0] <= mono_ns()) {
        end_computes(E, mono_ns());
        if (serve_kicks(E) < 0) return -1;
    }
    if (E->n_dl && E->dl[0].due <= mono_ns() && release_delayed(E, mono_ns(), mono_ns()) < 0) return -1;
    return 0;
}

static int set_int(int fd, int level, int opt, int v) { return setsockopt(fd, level, opt, &v, sizeof v); }

int nic_run(const nic_plan *P, nic_result *R) {
    engine E0 = {0}, *E = &E0;
    E->P = P; E->R = R;
    int rc = -1;
    int nh = P->n_hosts, nf = P->n_flows, nm = P->n_msgs;
    E->hosts = calloc(nh, sizeof(host_t));
    E->flows = calloc(nf ? nf : 1, sizeof(flow_t));
    E->msg_npkts = calloc(nm ? nm : 1, sizeof(int64_t));
    E->waiting = calloc(nm ? nm : 1, sizeof(int32_t));
    E->heap_t = calloc(nm ? nm : 1, sizeof(int64_t));
    E->heap_m = calloc(nm ? nm : 1, sizeof(int32_t));
    E->cc_running = calloc(nf ? nf : 1, sizeof(int32_t));
    E->kick = calloc((size_t)(nh ? nh : 1) * MAX_CLASSES, sizeof(int32_t));
    E->ready_ns = calloc(nm ? nm : 1, sizeof(int64_t));
    E->stream_free_ns = calloc(P->n_streams > 0 ? P->n_streams : 1, sizeof(int64_t));
    E->stream_sync_ns = calloc(P->n_streams > 0 ? P->n_streams : 1, sizeof(int64_t));
    E->live_busy = calloc((size_t)(P->n_streams > 0 ? P->n_streams : 0) + 1, sizeof(int64_t));
    int ep = epoll_create1(EPOLL_CLOEXEC), ep_door = epoll_create1(EPOLL_CLOEXEC);
    int hb = open(P->heartbeat_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    E->live = calloc(nf ? nf : 1, sizeof *E->live);
    E->ftx = fopen(P->tx_path, "wb"); E->frx = fopen(P->rx_path, "wb");
    E->fqp = fopen(P->qp_path, "wb"); E->fgap = fopen(P->gap_path, "wb");
    if (!E->hosts || !E->flows || !E->msg_npkts || !E->kick || !E->ready_ns || !E->stream_free_ns || !E->stream_sync_ns || !E->live_busy || ep < 0 || ep_door < 0 || hb < 0 || !E->ftx || !E->frx || !E->fqp || !E->fgap) {
        snprintf(R->error, sizeof R->error, "setting up the data plane failed: %s", strerror(errno));
        goto out;
    }
    setvbuf(E->ftx, NULL, _IOFBF, 1 << 20); setvbuf(E->frx, NULL, _IOFBF, 1 << 20);
    for (int m = 0; m < nm; m++) {
        int64_t b = P->msg_bytes[m];
        E->msg_npkts[m] = P->msg_flow[m] < 0 ? 0 : (b + P->payload_bytes - 1) / P->payload_bytes;
        if (P->msg_flow[m] >= 0 && E->msg_npkts[m] < 1) E->msg_npkts[m] = 1;
        if (P->msg_flow[m] >= 0) E->net_bytes_total += b;
        E->waiting[m] = P->msg_waiting[m];
    }
    for (int i = 0; i < nh; i++) {
        host_t *h = &E->hosts[i];
        h->rx_fd = P->host_rx_fd[i];
        h->bw_bps = P->host_bw_bps[i];
        h->lead_bytes = (int64_t)(h->bw_bps * P->lead_ns / 8e9);
        /* the kernel's receive time of every frame */
        if (set_int(h->rx_fd, SOL_SOCKET, SO_TIMESTAMPNS, 1) < 0) {
            snprintf(R->error, sizeof R->error, "SO_TIMESTAMPNS: %s", strerror(errno));
            goto out;
        }
        if (setup_ring(h, P->verify_icrc, R->error, sizeof R->error) < 0) goto out;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, h->rx_fd, &ev);
        /* edge-triggered: one wakeup per new last frame, and its copies are read only then */
        struct epoll_event dev = {.events = EPOLLIN | EPOLLET, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep_door, EPOLL_CTL_ADD, P->host_door_fd[i], &dev) < 0) {
            snprintf(R->error, sizeof R->error, "the doorbell socket: %s", strerror(errno));
            goto out;
        }
        for (int c = 0; c < MAX_CLASSES; c++) {
            nic_class *k = &h->cls[c];
            k->fd = P->host_data_fd[i * MAX_CLASSES + c];
            if (k->fd < 0) continue;
            int flags = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID |
                        SOF_TIMESTAMPING_OPT_TSONLY;
            if (set_int(k->fd, SOL_SOCKET, SO_TIMESTAMPING, flags) < 0) {
                snprintf(R->error, sizeof R->error, "software TX timestamps (SO_TIMESTAMPING) on a packet socket: %s",
                         strerror(errno));
                goto out;
            }
            k->pend = calloc(PEND_SIZE, sizeof(pending_tx));
            k->flows = calloc(nf ? nf : 1, sizeof(int32_t));
            h->cls_used[h->n_cls_used++] = c;
        }
    }
    for (int i = 0; i < nf; i++) {
        flow_t *f = &E->flows[i];
        gbn_sender_init(&f->tx, 0);
        gbn_receiver_init(&f->rx, P->ack_every, 0, P->nak_interval_ns);
        if (P->cc) dcqcn_init(&f->dc, &P->flow_dcqcn[i]);
        f->cap = P->flow_n_msgs[i];
        f->fifo = calloc(f->cap ? f->cap : 1, sizeof(int32_t));
        f->start_psn = calloc(f->cap ? f->cap : 1, sizeof(int64_t));
        for (int s = 0; s < f->cap; s++) f->start_psn[s] = -1;
        f->last_cnp_ns = -NEVER;
        nic_class *c = &E->hosts[P->flow_src[i]].cls[P->flow_cls[i]];
        if (!c->flows) { snprintf(R->error, sizeof R->error, "flow %d: its NIC class has no socket", i); goto out; }
        c->flows[c->n_flows++] = i;
    }
    /* Timed waits end when asked: Linux lets a normal thread's timers fire up to 50 us late
     * (timer slack), and this VM adds its own; measured here, a 200 us sleep overshot by 85 us
     * p50 with the default slack and 34 us with 1 ns. The batch end, a compute step's end, a
     * rate-limited queue pair's next frame and a lead's top-up all wait on such timers. */
    int old_slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    struct sigaction sa = {0}, old_term, old_int;
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);

    int64_t start = mono_ns();
    E->clock_off = E->prev_clock_off = clock_offset();
    for (int i = 0; i < nh; i++) E->hosts[i].last_read_ns = start;
    int64_t next_clock = start + CLOCK_RESAMPLE_NS;
    R->start_ns = E->start_ns = start;
    R->clock_offset_ns = E->clock_off;
    for (int m = 0; m < nm; m++) if (E->waiting[m] == 0) release(E, m, start);
    E->last_progress = start;
    int64_t next_rto = start + 1000000, next_cc = start + P->cc_tick_ns, next_hb = start + 200000000;
    int64_t last_wake = start;
    beat(E, hb, nm);   /* the setup above took a while on a big fabric: alive from here */
    R->reason = 0;
    struct epoll_event evs[256];
    int n_ev = 0;
    while (E->completed < nm || (P->reliable && E->acked < nm)) {
        int64_t now = mono_ns();
        /* arrivals first: the messages they complete release their dependents, which this same
         * pass then hands to the NICs */
        for (int i = 0; i < n_ev; i++) {
            int hi = (int)evs[i].data.u32;
            if (receive(E, &E->hosts[hi], hi, now) < 0) { R->reason = 4; goto done; }
        }
        n_ev = 0;
        if (E->n_dl && release_delayed(E, mono_ns(), mono_ns()) < 0) { R->reason = 4; goto done; }
        now = mono_ns();   /* later than every arrival just read: what follows is stamped after them */
        if (now >= next_clock) { measure_clock(E); next_clock = now + CLOCK_RESAMPLE_NS; }
        end_computes(E, now);
        if (P->reliable && now >= next_rto) { check_timeouts(E, now); next_rto = now + 1000000; }
        if (E->n_cc_running && now >= next_cc) { run_rate_timers(E, now); next_cc = now + P->cc_tick_ns; }
        if (serve_kicks(E) < 0) { R->reason = 4; goto done; }
        int64_t wake = now + 50000000;
        /* Which classes to top up: one once a quarter of its lead may have left at line rate (or
         * it is empty, or a rate-limited queue pair of it is due). The departures it learns then
         * and the frames it sends then go in one system call each, not one per frame, and three
         * quarters of the lead still cover a stall. */
        int n_serve = 0;
        for (int i = 0; i < nh; i++) {
            host_t *h = &E->hosts[i];
            int64_t low = h->lead_bytes - h->lead_bytes / 4;
            for (int u = 0; u < h->n_cls_used; u++) {
                nic_class *c = &h->cls[h->cls_used[u]];
                /* each class on its own clock: a pass can take milliseconds when the kernel's
                 * softirq work for the fabric interrupts it, and the pass's start would hide how
                 * long the NICs served last waited (their departures are later than it) */
                int64_t now = mono_ns();
                int64_t gone = (int64_t)((now - c->last_drain_ns) * h->bw_bps / 8e9);
                c->serving = 0;
                if (c->queued_bytes == 0 || c->queued_bytes - gone <= low || c->qp_due_ns <= now ||
                    now - c->last_drain_ns > DRAIN_MAX_NS) {
                    if (c->next_key != c->done_key && drain_departures(E, h, i, c) < 0) { R->reason = 4; goto done; }
                    c->last_drain_ns = now;
                    c->serving = 1;
                    n_serve++;
                }
            }
        }
        /* Serve them in rounds, each class's queue at most doubling per round (one frame when it
         * is empty): one thread hands frames to every NIC, at 5-7 us of kernel time per frame and
         * about 10 us per call here, so handing a whole lead to each NIC in turn left the NICs
         * served last idle for hundreds of microseconds when many start together (measured:
         * release to first frame 104 us median, 232 us p90, on 8 hosts of a ring). */
        const int64_t frame = HDR_LEN + P->payload_bytes;   /* the largest */
        E->in_rounds = 1;
        while (n_serve || E->new_serving) {
            n_serve = 0;
            E->new_serving = 0;
            for (int i = 0; i < nh; i++) {
                host_t *h = &E->hosts[i];
                for (int u = 0; u < h->n_cls_used; u++) {
                    nic_class *c = &h->cls[h->cls_used[u]];
                    if (!c->serving) continue;
                    /* what arrived or ended meanwhile is handled between two NICs' turns, not
                     * after the pass: a pass that tops up many NICs takes hundreds of us */
                    if (between_turns(E) < 0) { R->reason = 4; goto done; }
                    int64_t now = mono_ns();
                    int capped;
                    int64_t cap = c->queued_bytes + (c->queued_bytes > frame ? c->queued_bytes : frame);
                    int64_t w = fill_class(E, h, i, c, now, cap, &capped);
                    if (w < 0) { R->reason = 4; goto done; }
                    c->qp_due_ns = w;
                    c->serving = capped;
                    n_serve += capped;
                }
            }
        }
        E->in_rounds = 0;
        for (int i = 0; i < nh; i++) {
            host_t *h = &E->hosts[i];
            int64_t low = h->lead_bytes - h->lead_bytes / 4;
            for (int u = 0; u < h->n_cls_used; u++) {
                nic_class *c = &h->cls[h->cls_used[u]];
                if (c->qp_due_ns < wake) wake = c->qp_due_ns;
                if (c->queued_bytes > 0) {
                    int64_t t = c->last_drain_ns + (int64_t)((c->queued_bytes - low) * 8e9 / h->bw_bps);
                    if (t < wake) wake = t;
                }
            }
        }
        if (now >= next_hb) { beat(E, hb, nm); next_hb = now + 200000000; }
        if (P->reliable && next_rto < wake) wake = next_rto;
        if (E->n_cc_running && next_cc < wake) wake = next_cc;
        if (E->n_heap && E->heap_t[0] < wake) wake = E->heap_t[0];
        if (E->n_dl && E->dl[0].due < wake) wake = E->dl[0].due;
        if (next_hb < wake) wake = next_hb;
        /* Batch: at most one pass per batch_ns, so that each pass serves many frames; but a
         * message's last frame (the doorbell; with latency, its due time out of the delay line)
         * or a compute step's end ends the wait at once: others may wait for them, and a GPU
         * would post its next send then. Waiting out the batch instead left a host's NIC idle
         * with work for up to the batch per message released (median 74 us, p90 221 us on
         * megatron-fattree at D = 8000, 2026-12-03), which its windows counted. */
        int64_t earliest = last_wake + P->batch_ns;
        if (E->n_heap && E->heap_t[0] < earliest) earliest = E->heap_t[0];
        ends_pop_due(E, now);
        if (E->n_ends && E->ends[0] < earliest) earliest = E->ends[0];
        if (wake < earliest) wake = earliest;
        int64_t before = mono_ns();
        if (before < earliest) {
            struct timespec dto = {(earliest - before) / 1000000000LL, (earliest - before) % 1000000000LL};
            int nd = epoll_pwait2(ep_door, evs, 256, &dto, NULL);
            for (int i = 0; i < nd; i++) drain_door(P->host_door_fd[evs[i].data.u32]);
            before = mono_ns();
            if (nd > 0) wake = before;
        }
        int64_t left = wake - before;
        struct timespec to = {0, 0};
        if (left > 0) { to.tv_sec = left / 1000000000LL; to.tv_nsec = left % 1000000000LL; }
        int n = epoll_pwait2(ep, evs, 256, &to, NULL);
        int64_t after = mono_ns();
        last_wake = after;
        R->wakeups++;
        /* woken over 1 ms after the time asked for: the scheduler kept this loop off the CPU */
        int64_t over = after - (left > 0 ? wake : before);
        if (over > 1000000) {
            R->late_wakeups++;
            R->late_wakeup_ns += over;
            if (over > R->max_late_wakeup_ns) R->max_late_wakeup_ns = over;
        }
        if (n < 0 && errno != EINTR) { snprintf(R->error, sizeof R->error, "epoll: %s", strerror(errno)); R->reason = 4; goto done; }
        n_ev = n > 0 ? n : 0;
        if (stop_flag) { R->reason = 1; break; }
        if (after - start > P->time_limit_ns) { R->reason = 2; break; }
        if (after - E->last_progress > P->stall_ns) { R->reason = 3; break; }
    }
    R->end_ns = mono_ns();
    if (R->reason == 0) {
        /* Every message is done, but frames a spurious go-back resent may still be on their way
         * (queued in a NIC or the fabric): receive them, as the peer's NIC still would, so that
         * none counts as lost. At most DRAIN_TAIL_NS. */
        int64_t sent = 0;
        for (int i = 0; i < nh; i++) sent += R->host_stats[i * HS_N + HS_TX];
        while (R->rx_records < sent && !stop_flag && mono_ns() - R->end_ns < DRAIN_TAIL_NS) {
            struct timespec to = {0, 1000000};
            int n = epoll_pwait2(ep, evs, 256, &to, NULL);
            int64_t now = mono_ns();
            for (int i = 0; i < n; i++) {
                int hi = (int)evs[i].data.u32;
                if (receive(E, &E->hosts[hi], hi, now) < 0) { R->reason = 4; goto done; }
            }
            if (E->n_dl && release_delayed(E, mono_ns(), mono_ns()) < 0) { R->reason = 4; goto done; }
        }
    }
done:
    if (!R->end_ns) R->end_ns = mono_ns();
    /* Frames whose departure was never seen (still queued, or dropped) keep depart_ns = -1. */
    for (int i = 0; i < nh; i++) {
        host_t *h = &E->hosts[i];
        for (int u = 0; u < h->n_cls_used; u++) {
            nic_class *c = &h->cls[h->cls_used[u]];
            if (c->next_key != c->done_key) drain_departures(E, h, i, c);
            for (; c->done_key != c->next_key; c->done_key++) {
                pending_tx *pt = &c->pend[c->done_key & (PEND_SIZE - 1)];
                if (pt->frame_bytes) retire(E, h, c, pt, -1);
            }
        }
    }
    R->delayed_frames = E->delayed_total;
    R->delayed_max = E->delayed_max;
    R->messages_completed = E->completed;
    R->messages_acknowledged = E->acked;
    beat(E, hb, nm);
    for (int i = 0; i < nf; i++) {
        flow_t *f = &E->flows[i];
        int64_t *s = R->flow_stats + (size_t)i * FS_N;
        s[FS_RETX] = (int64_t)f->tx.retransmitted; s[FS_NAKS] = (int64_t)f->tx.naks;
        s[FS_TIMEOUTS] = (int64_t)f->tx.timeouts; s[FS_OOO] = (int64_t)f->rx.out_of_order;
        s[FS_DUPS] = (int64_t)f->rx.duplicates;
        if (P->cc) {
            s[FS_CNPS] = (int64_t)f->dc.cnps; s[FS_CUTS] = (int64_t)f->dc.cuts;
            R->flow_rate[2 * i] = f->dc.rate; R->flow_rate[2 * i + 1] = f->dc.alpha;
        }
    }
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
    if (old_slack > 0) prctl(PR_SET_TIMERSLACK, (unsigned long)old_slack, 0, 0, 0);
    rc = R->reason == 4 ? -1 : 0;
out:
    if (E->ftx) fclose(E->ftx);
    if (E->frx) fclose(E->frx);
    if (E->fqp) fclose(E->fqp);
    if (E->fgap) fclose(E->fgap);
    if (hb >= 0) close(hb);
    free(E->live);
    if (ep >= 0) close(ep);
    if (ep_door >= 0) close(ep_door);
    if (E->hosts) for (int i = 0; i < nh; i++) if (E->hosts[i].ring) munmap(E->hosts[i].ring, E->hosts[i].ring_bytes);
    if (E->hosts) for (int i = 0; i < nh; i++) for (int c = 0; c < MAX_CLASSES; c++) {
        free(E->hosts[i].cls[c].pend); free(E->hosts[i].cls[c].flows);
    }
    if (E->flows) for (int i = 0; i < nf; i++) { free(E->flows[i].fifo); free(E->flows[i].start_psn); }
    free(E->hosts); free(E->flows); free(E->msg_npkts); free(E->waiting); free(E->heap_t); free(E->heap_m);
    free(E->cc_running); free(E->kick); free(E->ready_ns); free(E->stream_free_ns); free(E->stream_sync_ns); free(E->live_busy); free(E->dl); free(E->ends);
    return rc;
}

/* Struct sizes, so that the Python mirror can check its layout at load time. */
int nic_sizeof(int what) {
    switch (what) {
    case 0: return sizeof(gbn_sender);
    case 1: return sizeof(gbn_receiver);
    case 2: return sizeof(dcqcn_params);
    case 3: return sizeof(dcqcn);
    case 4: return sizeof(nic_plan);
    case 5: return sizeof(nic_result);
    case 6: return sizeof(tx_rec);
    case 7: return sizeof(rx_rec);
    case 8: return sizeof(qp_rec);
    case 9: return sizeof(gap_rec);
    }
    return -1;
}
