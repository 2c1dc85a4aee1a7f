//! The exporter's state, updated from each closed interval's snapshot, and its encoding in
//! the OpenMetrics text format with the official `prometheus-client` crate.
//!
//! A scrape only encodes what the last update left here: it never touches the kernel maps
//! or the model, so scraping often costs the probes nothing.
//!
//! Disk figures are the kernel's exact cumulative totals since start (the snapshot's
//! `total`), so they are taken as they are; workload figures are summed here from each
//! interval (see [`super::workloads`]), since processes come and go.

use std::{
    collections::BTreeMap,
    fmt::{self, Write as _},
    sync::{Arc, Mutex, PoisonError},
};

use iotop_bpf_common::hist::SLOTS;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, NoLabelSet},
    metrics::MetricType,
    registry::{Registry, Unit},
};

use super::workloads::Workloads;
use crate::model::{DiskFigures, DiskRow, EventStats, Log2Hist, SizeHist, Snapshot};

/// Every metric name starts with this.
pub const PREFIX: &str = "iotop_bpf";

/// Latency buckets: the kernel's log2 µs slots up to 2^24 µs (16.8 s); slower requests are
/// counted in `+Inf` only. 25 bounds keep three histograms per disk near 90 series.
const LAST_LATENCY_SLOT: usize = 24;
/// Finding series kept at once; more are counted as dropped.
const FINDINGS_MAX: usize = 256;
/// A finding that stopped is exported as 0 this long (so alerts resolve), then dropped.
const FINDING_LINGER_NS: u64 = 300_000_000_000;

/// Who a finding is about: a process (by comm, as the workload series) or a disk.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Subject {
    Comm(String),
    Device(String),
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FindingKey {
    kind: &'static str,
    severity: &'static str,
    subject: Subject,
}

/// Everything a scrape encodes.
#[derive(Debug)]
pub struct Exporter {
    /// The last snapshot's disk rows (their `total` is cumulative since start).
    disks: Vec<DiskRow>,
    workloads: Workloads,
    /// Finding series and when each was last active.
    findings: BTreeMap<FindingKey, u64>,
    findings_dropped: u64,
    now_ns: u64,
    events: EventStats,
    intervals: u64,
    dstate_threads: usize,
    /// The recording's state, when recording (`--record`).
    recording: Option<Recorded>,
}

/// What the exporter says of the recording: whether it still records (a full disk stops
/// it, and an unattended `serve --record` should be alerted on), what it wrote and dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    pub up: bool,
    pub written_bytes: u64,
    pub dropped_events: u64,
}

impl Exporter {
    pub fn new(top: usize) -> Self {
        Self {
            disks: Vec::new(),
            workloads: Workloads::new(top),
            findings: BTreeMap::new(),
            findings_dropped: 0,
            now_ns: 0,
            events: EventStats::default(),
            intervals: 0,
            dstate_threads: 0,
            recording: None,
        }
    }

    /// Takes in one closed interval.
    pub fn update(&mut self, snap: &Snapshot) {
        self.disks.clone_from(&snap.disks);
        self.workloads.update(&snap.procs, snap.interval_ns);
        self.now_ns = snap.now_ns;
        self.events = snap.events;
        self.intervals += 1;
        self.dstate_threads = snap.dstate.len();
        for finding in snap.findings.iter().filter(|f| f.active) {
            let subject = match (finding.tgid, finding.dev) {
                (Some(_), _) | (None, None) => Subject::Comm(finding.comm.clone()),
                (None, Some(dev)) => Subject::Device(
                    snap.disks
                        .iter()
                        .find(|d| d.dev == dev)
                        .map_or_else(|| dev.to_string(), |d| d.name.clone()),
                ),
            };
            let key = FindingKey {
                kind: finding.kind.name(),
                severity: finding.severity.name(),
                subject,
            };
            if self.findings.len() >= FINDINGS_MAX && !self.findings.contains_key(&key) {
                self.findings_dropped += 1;
                continue;
            }
            self.findings.insert(key, snap.now_ns);
        }
        let now = snap.now_ns;
        self.findings
            .retain(|_, last| now.saturating_sub(*last) < FINDING_LINGER_NS);
    }
}

/// The exporter as the HTTP server and the pipeline share it: the pipeline updates it once
/// per interval, scrapes encode it.
#[derive(Debug, Clone)]
pub struct Shared(Arc<Mutex<Exporter>>);

impl Shared {
    pub fn new(exporter: Exporter) -> Self {
        Self(Arc::new(Mutex::new(exporter)))
    }

    pub fn update(&self, snap: &Snapshot) {
        // A panic while holding the lock cannot leave the exporter half-updated in a way
        // that matters more than losing the metrics: keep serving.
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .update(snap);
    }

    /// The recording's state, as of this interval.
    pub fn recorded(&self, recorded: Recorded) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recording = Some(recorded);
    }

    /// A registry whose one collector encodes this exporter.
    pub fn registry(&self) -> Registry {
        let mut registry = Registry::with_prefix(PREFIX);
        registry.register_collector(Box::new(self.clone()));
        registry
    }
}

impl Collector for Shared {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let exporter = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        exporter.encode(&mut encoder)
    }
}

/// The whole exposition in the OpenMetrics text format (ending in `# EOF`).
pub fn openmetrics(registry: &Registry) -> String {
    let mut out = String::with_capacity(64 * 1024);
    // Writing to a String cannot fail; an encoder error would be a bug in a label set.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        out.clear();
        let _ = writeln!(out, "# encoding failed: {e}\n# EOF");
    }
    out
}

/// A disk's requests and bytes per operation label.
fn per_op(f: &DiskFigures) -> [(&'static str, u64, Option<u64>); 5] {
    [
        ("read", f.reads, Some(f.read_bytes)),
        ("write", f.writes, Some(f.write_bytes)),
        ("flush", f.flushes, None),
        ("discard", f.discards, Some(f.discard_bytes)),
        // Write-zeroes, secure erase, zone commands: their bytes are not kept apart.
        ("other", f.others, None),
    ]
}

#[expect(
    clippy::cast_precision_loss,
    reason = "seconds and bytes as float sums"
)]
impl Exporter {
    fn encode(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        self.encode_disks(enc)?;
        self.encode_workloads(enc)?;
        self.encode_findings(enc)?;
        self.encode_tool(enc)
    }

    /// The disks' requests, bytes, errors, latency and size histograms (since start).
    fn encode_disks(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let mut requests = Vec::new();
        let mut bytes = Vec::new();
        for disk in &self.disks {
            for (op, count, op_bytes) in per_op(&disk.total) {
                requests.push((labels(&[("device", &disk.name), ("op", op)]), count));
                if let Some(b) = op_bytes {
                    bytes.push((labels(&[("device", &disk.name), ("op", op)]), b));
                }
            }
        }
        counters(
            enc,
            "disk_requests",
            "Block requests completed, per disk and operation (the kernel's exact per-disk \
             counts, since iotop-bpf started).",
            None,
            &requests,
        )?;
        counters(
            enc,
            "disk",
            "Bytes transferred by completed block requests, per disk and operation.",
            Some(&Unit::Bytes),
            &bytes,
        )?;
        let errors: Vec<_> = self
            .disks
            .iter()
            .map(|d| (labels(&[("device", &d.name)]), d.total.errors))
            .collect();
        counters(
            enc,
            "disk_errors",
            "Block requests completed with an error, per disk.",
            None,
            &errors,
        )?;
        self.disk_histogram(
            enc,
            "disk_latency",
            "Block request latency, created to completed (queue plus device time).",
            |f| (f.total_hist, f.latency_sum_ns),
        )?;
        self.disk_histogram(
            enc,
            "disk_queue",
            "Block request queue time, created to issued to the driver.",
            |f| (f.queue_hist, f.queue_sum_ns),
        )?;
        self.disk_histogram(
            enc,
            "disk_device",
            "Block request device time, issued to the driver to completed.",
            |f| (f.device_hist, f.device_sum_ns),
        )?;
        let mut sizes = Vec::new();
        for disk in &self.disks {
            for (op, hist) in [
                ("read", &disk.total.read_size_hist),
                ("write", &disk.total.write_size_hist),
            ] {
                sizes.push((
                    labels(&[("device", &disk.name), ("op", op)]),
                    size_buckets(hist),
                    hist.sum_bytes as f64,
                    hist.count(),
                ));
            }
        }
        histograms(
            enc,
            "disk_request_size",
            "Sizes of read and write requests, from the per-request records (fewer than \
             disk_requests_total if records were dropped).",
            &Unit::Bytes,
            &sizes,
        )?;
        Ok(())
    }

    /// The workloads' (command names') requests, bytes, sync latency and time in D.
    fn encode_workloads(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let mut requests = Vec::new();
        let mut bytes = Vec::new();
        let mut syncs = Vec::new();
        let mut dstate = Vec::new();
        for (comm, t) in self.workloads.series() {
            for (op, count, b) in [
                ("read", t.reads, t.read_bytes),
                ("write", t.writes, t.write_bytes),
            ] {
                requests.push((labels(&[("comm", comm), ("op", op)]), count));
                bytes.push((labels(&[("comm", comm), ("op", op)]), b));
            }
            syncs.push((
                labels(&[("comm", comm)]),
                latency_buckets(&t.sync_hist),
                t.sync_sum_ns as f64 / 1e9,
                t.syncs,
            ));
            dstate.push((labels(&[("comm", comm)]), t.dstate_ns as f64 / 1e9));
        }
        counters(
            enc,
            "workload_requests",
            "Block requests created by the processes of a command name (the --top names \
             with the most recent I/O; the rest summed as comm other).",
            None,
            &requests,
        )?;
        counters(
            enc,
            "workload",
            "Bytes of block requests created by the processes of a command name.",
            Some(&Unit::Bytes),
            &bytes,
        )?;
        histograms(
            enc,
            "workload_sync_latency",
            "Latency of sync calls (fsync, fdatasync, sync_file_range, syncfs, sync, \
             msync, O_DSYNC/O_SYNC writes, io_uring fsync) by the processes of a command name.",
            &Unit::Seconds,
            &syncs,
        )?;
        counters(
            enc,
            "workload_dstate",
            "Time the threads of a command name spent in D state (uninterruptible sleep).",
            Some(&Unit::Seconds),
            &dstate,
        )?;
        Ok(())
    }

    /// Which findings are active, by kind, severity and subject.
    fn encode_findings(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let findings: Vec<_> = self
            .findings
            .iter()
            .map(|(key, &last)| {
                let (name, value) = match &key.subject {
                    Subject::Comm(comm) => ("comm", comm.as_str()),
                    Subject::Device(device) => ("device", device.as_str()),
                };
                (
                    labels(&[
                        ("kind", key.kind),
                        ("severity", key.severity),
                        (name, value),
                    ]),
                    i64::from(last == self.now_ns),
                )
            })
            .collect();
        gauges(
            enc,
            "finding_active",
            "1 while a finding (a named pathological I/O pattern) is active in the last \
             interval, 0 for five minutes after it stopped.",
            None,
            &findings,
        )?;
        Ok(())
    }

    /// The tool itself: its events, intervals, what the exporter left out, threads in D and
    /// its version.
    fn encode_tool(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let no_labels = labels(&[]);
        for (name, help, value) in [
            (
                "events_received",
                "Records received from the kernel ring buffer.",
                self.events.received_total,
            ),
            (
                "events_dropped",
                "Records lost because the ring buffer was full (per-disk figures stay exact).",
                self.events.dropped_total,
            ),
            (
                "events_bad",
                "Records that could not be decoded.",
                self.events.bad_total,
            ),
            (
                "requests_unpaired",
                "Completions of block requests never seen created or issued.",
                self.events.unpaired_total,
            ),
            (
                "intervals",
                "Intervals closed (the exported figures are updated once per interval).",
                self.intervals,
            ),
            (
                "exporter_findings_dropped",
                "Finding series not exported because 256 were already.",
                self.findings_dropped,
            ),
        ] {
            counters(enc, name, help, None, &[(no_labels.clone(), value)])?;
        }
        gauges(
            enc,
            "exporter_folded_workloads",
            "Command names with I/O in the last interval that were summed as comm other \
             by the --top limit.",
            None,
            &[(
                no_labels.clone(),
                i64::try_from(self.workloads.folded()).unwrap_or(i64::MAX),
            )],
        )?;
        gauges(
            enc,
            "dstate_threads",
            "Threads in D state (uninterruptible sleep) at the end of the last interval.",
            None,
            &[(
                no_labels.clone(),
                i64::try_from(self.dstate_threads).unwrap_or(i64::MAX),
            )],
        )?;
        if let Some(r) = self.recording {
            gauges(
                enc,
                "recording_up",
                "1 while the recording (--record) keeps being written; 0 once a write failed \
                 (a full disk) and it stopped.",
                None,
                &[(no_labels.clone(), i64::from(r.up))],
            )?;
            counters(
                enc,
                "recording_written_bytes",
                "Bytes written to the recording, every part of it.",
                None,
                &[(no_labels.clone(), r.written_bytes)],
            )?;
            counters(
                enc,
                "recording_dropped_events",
                "Events left out of the recording while its disk fell behind.",
                None,
                &[(no_labels, r.dropped_events)],
            )?;
        }
        let mut info =
            enc.encode_descriptor("build", "The iotop-bpf version.", None, MetricType::Info)?;
        info.encode_info(&[("version", env!("CARGO_PKG_VERSION"))])?;
        Ok(())
    }

    /// One latency histogram per disk from its cumulative log2 slots and exact sum (ns).
    fn disk_histogram(
        &self,
        enc: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        pick: impl Fn(&DiskFigures) -> (Log2Hist, u64),
    ) -> fmt::Result {
        let samples: Vec<_> = self
            .disks
            .iter()
            .map(|d| {
                let (hist, sum_ns) = pick(&d.total);
                (
                    labels(&[("device", &d.name)]),
                    latency_buckets(&hist),
                    sum_ns as f64 / 1e9,
                    hist.total(),
                )
            })
            .collect();
        histograms(enc, name, help, &Unit::Seconds, &samples)
    }
}

/// A label set: (name, value) pairs.
type Labels = Vec<(&'static str, String)>;

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|&(name, value)| (name, value.to_string()))
        .collect()
}

fn counters(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: &[(Labels, impl prometheus_client::encoding::EncodeCounterValue)],
) -> fmt::Result {
    if samples.is_empty() {
        return Ok(());
    }
    let mut metric = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (labels, value) in samples {
        if labels.is_empty() {
            // `name{} 1` is valid, `name 1` is what everyone writes.
            metric.encode_counter::<NoLabelSet, _, u64>(value, None)?;
        } else {
            metric
                .encode_family(labels)?
                .encode_counter::<NoLabelSet, _, u64>(value, None)?;
        }
    }
    Ok(())
}

fn gauges(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: &[(Labels, i64)],
) -> fmt::Result {
    if samples.is_empty() {
        return Ok(());
    }
    let mut metric = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, value) in samples {
        if labels.is_empty() {
            metric.encode_gauge(value)?;
        } else {
            metric.encode_family(labels)?.encode_gauge(value)?;
        }
    }
    Ok(())
}

/// (labels, non-cumulative buckets ending in +Inf, exact sum, exact count).
type HistogramSample = (Labels, Vec<(f64, u64)>, f64, u64);

fn histograms(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: &Unit,
    samples: &[HistogramSample],
) -> fmt::Result {
    if samples.is_empty() {
        return Ok(());
    }
    let mut metric = enc.encode_descriptor(name, help, Some(unit), MetricType::Histogram)?;
    for (labels, buckets, sum, count) in samples {
        metric
            .encode_family(labels)?
            .encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?;
    }
    Ok(())
}

/// Log2 µs slots as buckets in seconds: slot `i` counts latencies below 2^i µs, so its
/// bound is `le = 2^i µs`. (A latency of exactly 2^i µs, to the nanosecond, is in the next
/// slot: the kernel's slots are half-open.)
#[expect(clippy::cast_precision_loss, reason = "bucket bounds")]
fn latency_buckets(hist: &Log2Hist) -> Vec<(f64, u64)> {
    let mut buckets: Vec<(f64, u64)> = (0..=LAST_LATENCY_SLOT)
        .map(|slot| ((1u64 << slot) as f64 / 1e6, hist.slots[slot]))
        .collect();
    buckets.push((
        f64::INFINITY,
        hist.slots[LAST_LATENCY_SLOT + 1..SLOTS].iter().sum(),
    ));
    buckets
}

#[expect(clippy::cast_precision_loss, reason = "bucket bounds")]
fn size_buckets(hist: &SizeHist) -> Vec<(f64, u64)> {
    hist.slots
        .iter()
        .enumerate()
        .map(|(slot, &n)| {
            (
                SizeHist::slot_le_bytes(slot).map_or(f64::INFINITY, |b| b as f64),
                n,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
