"""The API's counters in Prometheus's exposition format (GET /metrics), with the names and labels
switch exporters use: one series per switch, port and class, counters ending in _total.

Prometheus's rate() over these is per second of wall clock, the emulated fabric's time: a rate of
bytes times testbed_dilation_factor is the hardware fabric's, and divided by
testbed_port_link_bits_per_second it is the link's utilisation, whatever D is
(dashboards/grafana-fabric.json does both)."""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

PORT_LABELS = ["switch", "port", "link", "class"]

# (metric, kind, help, record field)
CLASS_SERIES = (
    ("testbed_port_transmit_bytes", "counter", "bytes the port's queue sent, emulated", "tx_bytes"),
    ("testbed_port_transmit_frames", "counter", "frames the port's queue sent", "tx_frames"),
    ("testbed_port_queue_bytes", "gauge", "bytes in the port's queue now", "queue_bytes"),
    ("testbed_port_ecn_marked_frames", "counter", "frames the queue marked CE", "ecn_marked"),
    ("testbed_port_dropped_frames", "counter", "frames the queue dropped (buffer full)", "dropped"),
    ("testbed_port_pfc_pauses_received", "counter", "PFC pauses the port received (its transmitter stopped)",
     "pauses_received"),
    ("testbed_port_pfc_pauses_sent", "counter", "PFC pauses the port sent to its peer", "pauses_sent"),
    ("testbed_port_pfc_paused", "gauge", "1 while the port's transmitter is paused in the class", "paused"),
)


class RunCollector:
    """A collector over one read of the counters (the API makes one per scrape)."""

    def __init__(self, header: dict, ports: list[dict], progress: dict | None, qps: list[dict] = ()):
        self.header, self.ports, self.progress, self.qps = header, ports, progress, qps

    def collect(self):
        run = {"run": str(self.header.get("run")), "scenario": str(self.header.get("scenario"))}
        d = GaugeMetricFamily("testbed_dilation_factor", "D: hardware times are wall-clock times / D, rates x D",
                              labels=list(run))
        d.add_metric(list(run.values()), float(self.header["dilation_factor"]))
        yield d
        families = {}
        for name, kind, help_, _ in CLASS_SERIES:
            make = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            families[name] = make(name, help_, labels=PORT_LABELS)
        link_bps = GaugeMetricFamily("testbed_port_link_bits_per_second", "the link's emulated rate",
                                     labels=["switch", "port", "link"])
        crc = CounterMetricFamily("testbed_port_crc_errors", "frames this port sent that bit errors damaged "
                                  "(the far end's MAC counts them as CRC errors)", labels=["switch", "port", "link"])
        for p in self.ports:
            port_labels = [p["switch"], p["port"], p["link"]]
            link_bps.add_metric(port_labels, p["link_gbps_hw"] * 1e9 / float(self.header["dilation_factor"]))
            crc.add_metric(port_labels, p["crc_errors"])
            for c in p["classes"]:
                labels = port_labels + [c["class_name"]]
                for name, _, _, field in CLASS_SERIES:
                    families[name].add_metric(labels, float(c[field]))
        yield from families.values()
        yield link_bps
        yield crc
        qp_labels = ["qp", "src", "dst", "tag"]
        sent = CounterMetricFamily("testbed_qp_sent_frames", "data frames the queue pair sent (PSNs, resends not "
                                   "counted again)", labels=qp_labels)
        resent = CounterMetricFamily("testbed_qp_retransmitted_frames", "frames go-back-N resent", labels=qp_labels)
        cnps = CounterMetricFamily("testbed_qp_cnps_received", "CNPs the queue pair's sender received",
                                   labels=qp_labels)
        rate = GaugeMetricFamily("testbed_qp_dcqcn_rate_bits_per_second", "DCQCN's rate limiter, emulated "
                                 "(x testbed_dilation_factor: the hardware's)", labels=qp_labels)
        for q in self.qps:
            labels = [str(q["qp"]), q["src"], q["dst"], q["tag"]]
            sent.add_metric(labels, q["frames_sent"])
            resent.add_metric(labels, q["retransmitted"])
            cnps.add_metric(labels, q["cnps"])
            if q["dcqcn_rate_gbps_hw"] is not None:
                rate.add_metric(labels, q["dcqcn_rate_gbps_hw"] * 1e9 / float(self.header["dilation_factor"]))
        yield from (sent, resent, cnps, rate)
        if self.progress:
            for name, field, help_ in (("testbed_job_messages_done", "messages_done", "messages completed"),
                                       ("testbed_job_messages", "messages", "messages in the plan"),
                                       ("testbed_job_payload_bytes_done", "payload_bytes_done",
                                        "payload bytes of completed messages"),
                                       ("testbed_job_payload_bytes", "payload_bytes", "payload bytes in the plan")):
                g = GaugeMetricFamily(name, help_, labels=list(run))
                g.add_metric(list(run.values()), float(self.progress[field]))
                yield g
            training = self.progress.get("training")
            if training:
                g = GaugeMetricFamily("testbed_job_sync_share", "the workers' mean share of the time not computing "
                                      "(waiting on communication), since the traffic started and over the "
                                      "last window", labels=[*run, "over"])
                for over in ("since_start", "last_window"):
                    value = training[f"sync_share_{over}"]
                    if value is not None:
                        g.add_metric([*run.values(), over], value)
                yield g
