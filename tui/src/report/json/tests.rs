//! The JSON report's contract and its fields, on synthetic snapshots.

use super::*;
use crate::model::fixtures::demo_snapshot;

/// The contract, pinned: a field renamed or removed fails here (the snapshot is the golden
/// file, `snapshots/iotop_bpf__report__json__tests__interval.snap`).
#[test]
fn the_json_contract_is_pinned() {
    let snap = demo_snapshot();
    let value = serde_json::to_value(interval(
        &snap,
        "2026-11-22T00:00:01.250Z".into(),
        Bounds::default(),
        &[],
    ))
    .unwrap();
    insta::assert_snapshot!("interval", serde_json::to_string_pretty(&value).unwrap());
}

#[test]
fn host_figures_unknown_are_null_not_zero() {
    let mut snap = demo_snapshot();
    snap.host = HostFigures::default();
    let value =
        serde_json::to_value(interval(&snap, String::new(), Bounds::default(), &[])).unwrap();
    let host = value["host"].as_object().unwrap();
    assert_eq!(host.len(), 10, "{host:?}");
    assert!(host.values().all(serde_json::Value::is_null), "{host:?}");
}

#[test]
fn call_latency_prequeue_and_dirty_pauses_per_process() {
    let snap = crate::model::fixtures::throttled_snapshot();
    let value =
        serde_json::to_value(interval(&snap, String::new(), Bounds::default(), &[])).unwrap();
    let procs = value["processes"].as_array().unwrap();
    let by_pid = |pid: u64| procs.iter().find(|p| p["pid"] == pid).unwrap();
    let fio = by_pid(4321);
    assert_eq!(fio["direct_io_calls"], 800);
    let p99 = fio["call_latency_us"]["p99"].as_u64().unwrap();
    assert!(p99.abs_diff(60_000) < 7_500, "{p99}");
    assert!(fio["io_latency_us"]["p99"].as_u64().unwrap() < 60);
    let prequeue = fio["prequeue_ms"].as_u64().unwrap();
    assert!((1_100..1_300).contains(&prequeue), "{prequeue}");
    assert_eq!(fio["limits_cgroup"], "blkio:/slow");
    assert_eq!(fio["io_limits"][0]["kind"], "write_iops");
    assert_eq!(fio["io_limits"][0]["value"], 800);
    assert_eq!(fio["io_limits"][0]["dev"], "7:0");
    let dd = by_pid(5150);
    assert_eq!(
        (dd["dirty_pause_ms"].as_u64(), dd["dirty_pauses"].as_u64()),
        (Some(760), Some(38))
    );
    assert_eq!(dd["totals"]["dirty_pause_ms"], 760);
    let kinds: Vec<&str> = value["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.len(), 2);
    assert!(kinds.contains(&"io_throttled") && kinds.contains(&"dirty_throttled"));
}

#[test]
fn pid_is_the_process_and_tid_the_thread() {
    let snap = demo_snapshot();
    let value =
        serde_json::to_value(interval(&snap, String::new(), Bounds::default(), &[])).unwrap();
    let make = value["dstate"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["comm"] == "make")
        .unwrap();
    assert_eq!(
        (make["pid"].as_u64(), make["tid"].as_u64()),
        (Some(4711), Some(4711))
    );
    assert!(
        value["processes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["tid"].is_null())
    );
}
