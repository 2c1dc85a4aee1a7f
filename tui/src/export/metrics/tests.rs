//! The exporter on synthetic snapshots: exact figures, the OpenMetrics shape, bounded
//! cardinality, monotonic counters.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::{
    export::{
        classic,
        workloads::{DEFAULT_TOP, OTHER},
    },
    model::{ProcFigures, ProcRow, fixtures::demo_snapshot},
};

const SECOND: u64 = 1_000_000_000;

fn exposition(exporter: Exporter) -> (Shared, String) {
    let shared = Shared::new(exporter);
    let text = openmetrics(&shared.registry());
    (shared, text)
}

/// `series -> value` of an exposition's sample lines.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_string(), value.parse().unwrap())
        })
        .collect()
}

fn get(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no {series} in {samples:#?}"))
}

#[test]
fn disk_figures_are_the_kernel_totals_exactly() {
    let snap = demo_snapshot();
    let mut exporter = Exporter::new(DEFAULT_TOP);
    exporter.update(&snap);
    let (_, text) = exposition(exporter);
    let s = samples(&text);
    let nvme = snap.disks.iter().find(|d| d.name == "nvme0n1").unwrap();
    // 400 postgres writes + 60 journal writes; 30 flushes; one slow read.
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_disk_requests_total{device="nvme0n1",op="write"}"#
        ),
        460.0
    );
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_disk_requests_total{device="nvme0n1",op="flush"}"#
        ),
        30.0
    );
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_disk_requests_total{device="nvme0n1",op="read"}"#
        ),
        1.0
    );
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_disk_bytes_total{device="nvme0n1",op="write"}"#
        ),
        (400 * 8192 + 60 * 4096) as f64
    );
    assert!(!s.contains_key(r#"iotop_bpf_disk_bytes_total{device="nvme0n1",op="flush"}"#));
    for (name, sum_ns) in [
        ("latency", nvme.total.latency_sum_ns),
        ("queue", nvme.total.queue_sum_ns),
        ("device", nvme.total.device_sum_ns),
    ] {
        let prefix = format!("iotop_bpf_disk_{name}_seconds");
        assert_eq!(
            get(&s, &format!(r#"{prefix}_count{{device="nvme0n1"}}"#)),
            491.0
        );
        let sum = get(&s, &format!(r#"{prefix}_sum{{device="nvme0n1"}}"#));
        assert!((sum - sum_ns as f64 / 1e9).abs() < 1e-12, "{name}: {sum}");
        assert_eq!(
            get(
                &s,
                &format!(r#"{prefix}_bucket{{le="+Inf",device="nvme0n1"}}"#)
            ),
            491.0
        );
        // Cumulative buckets never decrease.
        let buckets: Vec<f64> = text
            .lines()
            .filter(|l| {
                l.starts_with(&format!("{prefix}_bucket{{")) && l.contains(r#"device="nvme0n1""#)
            })
            .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
            .collect();
        assert_eq!(buckets.len(), LAST_LATENCY_SLOT + 2);
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    }
    // The slow read (52 ms) is the only request above 2^15 us (32.8 ms).
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_disk_latency_seconds_bucket{le="0.032768",device="nvme0n1"}"#
        ),
        490.0
    );
    // Sizes: 250 reads of 128 KiB on loop0.
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_disk_request_size_bytes_bucket{le="65536.0",device="loop0",op="read"}"#
        ),
        0.0
    );
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_disk_request_size_bytes_bucket{le="131072.0",device="loop0",op="read"}"#
        ),
        250.0
    );
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_disk_request_size_bytes_sum{device="loop0",op="read"}"#
        ),
        250.0 * 131_072.0
    );
    assert!(text.ends_with("# EOF\n"));
    assert!(text.contains("# UNIT iotop_bpf_disk_latency_seconds seconds\n"));
    assert!(text.contains(&format!(
        "iotop_bpf_build_info{{version=\"{}\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    )));
}

#[test]
fn workloads_findings_and_the_tool_itself() {
    let snap = demo_snapshot();
    let mut exporter = Exporter::new(DEFAULT_TOP);
    exporter.update(&snap);
    // The same interval again, later: now the comms have series (the first went to other).
    let mut again = snap.clone();
    again.now_ns += SECOND;
    exporter.update(&again);
    let (shared, text) = exposition(exporter);
    let s = samples(&text);
    let postgres = snap.procs.iter().find(|p| p.comm == "postgres").unwrap();
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_workload_bytes_total{comm="postgres",op="write"}"#
        ),
        postgres.interval.write_bytes as f64
    );
    let all_writes: u64 = snap.procs.iter().map(|p| p.interval.writes).sum();
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_workload_requests_total{comm="other",op="write"}"#
        ),
        all_writes as f64,
        "the first interval of every comm went to other"
    );
    let lab001 = snap.procs.iter().find(|p| p.comm == "lab001").unwrap();
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_workload_sync_latency_seconds_count{comm="lab001"}"#
        ),
        lab001.interval.sync.syncs as f64
    );
    assert_eq!(lab001.interval.sync.syncs, 200);
    assert!(
        (get(
            &s,
            r#"iotop_bpf_workload_sync_latency_seconds_sum{comm="lab001"}"#
        ) - lab001.interval.sync.time_ns as f64 / 1e9)
            .abs()
            < 1e-9
    );
    // 150 ms of finished episodes and 10 ms of the one in progress.
    assert_eq!(lab001.interval.dstate_ns, 160_000_000);
    assert_eq!(
        get(
            &s,
            r#"iotop_bpf_workload_dstate_seconds_total{comm="lab001"}"#
        ),
        0.16
    );
    let active: Vec<_> = snap.findings.iter().filter(|f| f.active).collect();
    assert!(!active.is_empty(), "the demo has findings");
    for f in &active {
        let subject = match f.tgid {
            Some(_) => format!(r#"comm="{}""#, f.comm),
            None => format!(
                r#"device="{}""#,
                snap.disks
                    .iter()
                    .find(|d| Some(d.dev) == f.dev)
                    .unwrap()
                    .name
            ),
        };
        let series = format!(
            r#"iotop_bpf_finding_active{{kind="{}",severity="{}",{subject}}}"#,
            f.kind.name(),
            f.severity.name()
        );
        assert_eq!(get(&s, &series), 1.0, "{series}");
    }
    assert_eq!(get(&s, "iotop_bpf_dstate_threads"), 2.0);
    assert_eq!(get(&s, "iotop_bpf_intervals_total"), 2.0);
    assert_eq!(
        get(&s, "iotop_bpf_events_received_total"),
        snap.events.received_total as f64
    );

    // Findings stop: 0 for five minutes, then gone.
    let quiet = |now_ns| Snapshot {
        now_ns,
        interval_ns: SECOND,
        disks: snap.disks.clone(),
        ..Snapshot::default()
    };
    shared.update(&quiet(again.now_ns + SECOND));
    let s = samples(&openmetrics(&shared.registry()));
    let zero = s
        .iter()
        .filter(|(k, _)| k.starts_with("iotop_bpf_finding_active"))
        .collect::<Vec<_>>();
    assert_eq!(zero.len(), active.len());
    assert!(zero.iter().all(|(_, v)| **v == 0.0), "{zero:?}");
    shared.update(&quiet(again.now_ns + 301 * SECOND));
    let text = openmetrics(&shared.registry());
    assert!(!text.contains("iotop_bpf_finding_active"), "{text}");
}

#[test]
fn help_and_type_lines_are_valid_in_both_formats() {
    let mut exporter = Exporter::new(DEFAULT_TOP);
    exporter.update(&demo_snapshot());
    let (_, text) = exposition(exporter);
    let mut families = BTreeSet::new();
    for line in text.lines() {
        if let Some(help) = line.strip_prefix("# HELP ") {
            // OpenMetrics escapes `"` in HELP and the classic format does not: use neither.
            assert!(!help.contains(['"', '\\']), "{line}");
            assert!(help.starts_with("iotop_bpf_"), "{line}");
            assert!(
                families.insert(help.split(' ').next().unwrap().to_string()),
                "{line}"
            );
        }
    }
    assert!(families.len() >= 15, "{families:?}");
    let classic = classic::from_openmetrics(&text).unwrap();
    assert!(classic.contains("# TYPE iotop_bpf_disk_requests_total counter\n"));
    assert!(classic.contains("# TYPE iotop_bpf_build_info gauge\n"));
    assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"));
    assert_eq!(
        samples(&classic),
        samples(&text),
        "the same samples in both formats"
    );
}

/// `n` processes of distinct names, each writing `bytes`.
fn short_lived(first: u32, n: u32, bytes: u64) -> Vec<ProcRow> {
    (first..first + n)
        .map(|i| ProcRow {
            tgid: 100_000 + i,
            comm: format!("job-{i}"),
            kernel_thread: false,
            exited: true,
            cgroup: None,
            interval: ProcFigures {
                writes: bytes / 4096,
                write_bytes: bytes,
                ..ProcFigures::default()
            },
            since_start: None,
            devices: Vec::new(),
            recent_syncs: Vec::new(),
            io_limits: None,
            dirty_state: None,
        })
        .collect()
}

/// 5000 differently named short-lived processes doing I/O, 50 per second for 100 s, next to
/// a few steady workloads: the exposition stays under 2000 series, few names ever get a
/// series (hysteresis), no counter goes backwards, and nothing is lost.
#[test]
fn five_thousand_short_lived_names_stay_under_two_thousand_series() {
    let demo = demo_snapshot();
    let shared = Shared::new(Exporter::new(DEFAULT_TOP));
    let registry = shared.registry();
    let mut previous: BTreeMap<String, f64> = BTreeMap::new();
    let mut names_exported = BTreeSet::new();
    let mut written = 0u64;
    let mut largest = 0;
    for second in 0..100u32 {
        let mut procs = short_lived(second * 50, 50, 8192);
        for (i, steady) in ["postgres", "nginx", "rsync"].iter().enumerate() {
            let mut row = short_lived(0, 1, (i as u64 + 1) << 20).remove(0);
            row.comm = (*steady).to_string();
            procs.push(row);
        }
        written += procs.iter().map(|p| p.interval.write_bytes).sum::<u64>();
        let snap = Snapshot {
            seq: u64::from(second) + 1,
            now_ns: u64::from(second + 1) * SECOND,
            interval_ns: SECOND,
            disks: demo.disks.clone(),
            procs,
            ..Snapshot::default()
        };
        shared.update(&snap);
        let now = samples(&openmetrics(&registry));
        largest = largest.max(now.len());
        assert!(now.len() < 2000, "second {second}: {} series", now.len());
        for (series, value) in &now {
            if let Some(comm) = series.split("comm=\"").nth(1) {
                names_exported.insert(comm.split('"').next().unwrap().to_string());
            }
            let counter_like = ["_total", "_count", "_sum", "_bucket"]
                .iter()
                .any(|s| series.split('{').next().unwrap().ends_with(s));
            if counter_like && let Some(before) = previous.get(series) {
                assert!(value >= before, "{series} went back: {before} -> {value}");
            }
        }
        previous = now;
    }
    // Every byte is in exactly one series (members, other) or kept for a returning member.
    let exporter = shared.0.lock().unwrap();
    let kept: u64 = exporter
        .workloads
        .series()
        .map(|(_, t)| t.write_bytes)
        .sum::<u64>()
        + exporter.workloads.retired_write_bytes();
    assert_eq!(kept, written);
    assert!(names_exported.contains(OTHER) && names_exported.contains("postgres"));
    assert!(
        names_exported.len() <= 120,
        "{} names ever had series: {names_exported:?}",
        names_exported.len()
    );
    eprintln!(
        "largest exposition: {largest} series; names ever exported: {}",
        names_exported.len()
    );
}

/// A comm is whatever its process says: its label keeps the exact text with OpenMetrics'
/// escapes (`\\`, `\"`, `\n`) and nothing else, in both formats, and a line stays one line.
#[test]
fn a_hostile_comm_is_one_label_escaped_as_openmetrics_says() {
    let hostile = "\u{1b}]2;a\"b\\c\nd";
    let mut snap = demo_snapshot();
    let lab001 = snap.procs.iter_mut().find(|p| p.comm == "lab001").unwrap();
    lab001.comm = hostile.to_string();
    let mut exporter = Exporter::new(DEFAULT_TOP);
    exporter.update(&snap);
    snap.now_ns += SECOND;
    exporter.update(&snap);
    let (_, text) = exposition(exporter);
    let label = "comm=\"\u{1b}]2;a\\\"b\\\\c\\nd\"";
    let series = format!("iotop_bpf_workload_dstate_seconds_total{{{label}}}");
    assert_eq!(get(&samples(&text), &series), 0.16, "{text}");
    let classic = classic::from_openmetrics(&text).unwrap();
    assert_eq!(get(&samples(&classic), &series), 0.16);
    for body in [&text, &classic] {
        assert!(
            body.lines()
                .all(|l| l.starts_with('#') || l.starts_with("iotop_bpf_")),
            "a newline in a name split a line"
        );
    }
}

/// With --record, whether the recording still is written: an unattended `serve --record`
/// whose disk filled is alerted on; without it, no such series.
#[test]
fn the_recording_is_up_until_a_write_fails() {
    let shared = Shared::new(Exporter::new(DEFAULT_TOP));
    shared.update(&demo_snapshot());
    let text = openmetrics(&shared.registry());
    assert!(!text.contains("recording"), "not recording: {text}");
    shared.recorded(Recorded {
        up: false,
        written_bytes: 124_542,
        dropped_events: 7,
    });
    let s = samples(&openmetrics(&shared.registry()));
    assert_eq!(get(&s, "iotop_bpf_recording_up"), 0.0);
    assert_eq!(
        get(&s, "iotop_bpf_recording_written_bytes_total"),
        124_542.0
    );
    assert_eq!(get(&s, "iotop_bpf_recording_dropped_events_total"), 7.0);
}
