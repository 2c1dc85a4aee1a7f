//! The processes table's columns: each one's header, width, sort key, the narrowest pane
//! that shows it and how it formats a row; which of them fit a pane, and so which sort keys
//! are on screen.

use super::{ProcFigures, ProcRow, SortKey, table, units};

/// One column of the table.
pub(super) struct Column {
    pub(super) header: &'static str,
    pub(super) width: u16,
    pub(super) sort: Option<SortKey>,
    /// Shown only when the pane is at least this wide.
    min_pane_width: u16,
    pub(super) cell: fn(&ProcRow, &ProcFigures, f64) -> String,
}

fn per_s(n: u64, secs: f64) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "display rates")]
    let n = n as f64;
    n / secs
}

/// The narrow set fits 80 characters with the selection mark; wider terminals add the rest
/// (time in D from 90, the maxima and sync latency from 114, logical writes from 121, direct
/// I/O call latency from 136, dirty pauses from 142, the cgroup from 166, all of them from
/// 180), each threshold where the columns before it fit.
const COLUMNS: &[Column] = &[
    Column {
        header: "PID",
        width: 7,
        sort: Some(SortKey::Pid),
        min_pane_width: 0,
        cell: |p, _, _| p.tgid.to_string(),
    },
    Column {
        header: "COMM",
        width: 14,
        sort: Some(SortKey::Comm),
        min_pane_width: 0,
        cell: |p, _, _| p.comm.clone(),
    },
    Column {
        header: "R/s",
        width: 6,
        sort: Some(SortKey::ReadOps),
        min_pane_width: 0,
        cell: |_, f, s| format!("{:.0}", per_s(f.reads, s)),
    },
    Column {
        header: "W/s",
        width: 6,
        sort: Some(SortKey::WriteOps),
        min_pane_width: 0,
        cell: |_, f, s| format!("{:.0}", per_s(f.writes, s)),
    },
    Column {
        header: "RMB/s",
        width: 7,
        sort: Some(SortKey::ReadBytes),
        min_pane_width: 0,
        cell: |_, f, s| format!("{:.2}", units::mib(per_s(f.read_bytes, s))),
    },
    Column {
        header: "WMB/s",
        width: 7,
        sort: Some(SortKey::WriteBytes),
        min_pane_width: 0,
        // Write-back counts on the process that dirtied the pages, not on the flusher.
        cell: |_, f, s| format!("{:.2}", units::mib(per_s(f.write_bytes_caused(), s))),
    },
    Column {
        header: "p50",
        width: 6,
        sort: Some(SortKey::P50),
        min_pane_width: 0,
        cell: |_, f, _| units::latency(f.latency.p50_ns),
    },
    Column {
        header: "p99",
        width: 6,
        sort: Some(SortKey::P99),
        min_pane_width: 0,
        cell: |_, f, _| units::latency(f.latency.p99_ns),
    },
    Column {
        header: "max",
        width: 6,
        sort: None,
        min_pane_width: 114,
        cell: |_, f, _| units::latency(f.latency.max_ns),
    },
    Column {
        header: "C.p99",
        width: 6,
        sort: None,
        min_pane_width: 136,
        cell: |_, f, _| call_p99(f),
    },
    Column {
        header: "PREQ",
        width: 5,
        sort: None,
        min_pane_width: 136,
        cell: |_, f, _| prequeue_share(f),
    },
    Column {
        header: "SYNC/s",
        width: 6,
        sort: Some(SortKey::Syncs),
        min_pane_width: 0,
        cell: |_, f, s| sync_rate(f, s),
    },
    Column {
        header: "S.p50",
        width: 6,
        sort: None,
        min_pane_width: 114,
        cell: |_, f, _| sync_latency(f, f.sync.latency.p50_ns),
    },
    Column {
        header: "S.p99",
        width: 6,
        sort: Some(SortKey::SyncP99),
        min_pane_width: 114,
        cell: |_, f, _| sync_latency(f, f.sync.latency.p99_ns),
    },
    Column {
        header: "S.max",
        width: 6,
        sort: None,
        min_pane_width: 114,
        cell: |_, f, _| sync_latency(f, f.sync.latency.max_ns),
    },
    Column {
        header: "LMB/s",
        width: 6,
        sort: None,
        min_pane_width: 121,
        cell: |_, f, s| format!("{:.2}", units::mib(per_s(f.logical_write_bytes, s))),
    },
    Column {
        header: "AMP",
        width: 5,
        sort: Some(SortKey::Amplification),
        min_pane_width: 0,
        cell: |_, f, _| amplification(f),
    },
    Column {
        header: "D",
        width: 5,
        sort: Some(SortKey::DState),
        min_pane_width: 90,
        cell: |_, f, s| dstate_share(f, s),
    },
    Column {
        header: "PAUSE",
        width: 5,
        sort: None,
        min_pane_width: 142,
        cell: |_, f, s| dirty_share(f, s),
    },
    Column {
        header: "DISKS",
        width: 12,
        sort: None,
        min_pane_width: 180,
        cell: |p, _, _| disks(p),
    },
    Column {
        header: "CGROUP",
        width: 22,
        sort: None,
        min_pane_width: 166,
        cell: |p, _, _| {
            p.cgroup
                .as_ref()
                .map_or_else(|| "-".into(), |c| c.name.clone())
        },
    },
];

fn sync_rate(f: &ProcFigures, secs: f64) -> String {
    if f.sync.syncs == 0 {
        "-".into()
    } else {
        format!("{:.0}", per_s(f.sync.syncs, secs))
    }
}

fn sync_latency(f: &ProcFigures, ns: u64) -> String {
    if f.sync.syncs == 0 {
        "-".into()
    } else {
        units::latency(ns)
    }
}

/// The write amplification of its typical sync call (one definition with the finding).
fn amplification(f: &ProcFigures) -> String {
    f.sync
        .amplification()
        .map_or_else(|| "-".into(), crate::model::quantity::times)
}

/// Time in D as a share of the period (100% = one thread blocked the whole time).
fn dstate_share(f: &ProcFigures, secs: f64) -> String {
    if f.dstate_ns == 0 {
        return "-".into();
    }
    #[expect(clippy::cast_precision_loss, reason = "a display percentage")]
    let pct = f.dstate_ns as f64 / 1e9 / secs * 100.0;
    format!("{pct:.0}%")
}

/// The p99 latency of its direct I/O calls, entry to completion (`-` without calls).
fn call_p99(f: &ProcFigures) -> String {
    if f.waits.calls.latency.count == 0 {
        "-".into()
    } else {
        units::latency(f.waits.calls.latency.p99_ns)
    }
}

/// The share of its direct I/O call time spent outside any request (the wait before the
/// request: blk-throttle, iocost, a full queue).
fn prequeue_share(f: &ProcFigures) -> String {
    if f.waits.calls.latency.count == 0 {
        "-".into()
    } else {
        format!("{:.0}%", f.waits.calls.prequeue_share() * 100.0)
    }
}

/// Time its writers were paused by dirty throttling, as a share of the period.
fn dirty_share(f: &ProcFigures, secs: f64) -> String {
    if f.waits.dirty.pause_ns == 0 {
        return "-".into();
    }
    #[expect(clippy::cast_precision_loss, reason = "a display percentage")]
    let pct = f.waits.dirty.pause_ns as f64 / 1e9 / secs * 100.0;
    format!("{pct:.0}%")
}

fn disks(p: &ProcRow) -> String {
    p.devices
        .iter()
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The columns shown in a pane `width` wide and their widths: those whose width threshold
/// it reaches, then, while they do not fit with the selection mark, the one of the highest
/// threshold goes. So every column shown is whole, and [`sort_keys`] names exactly the
/// columns on screen. With `C` the name column takes what is left, up to 22 (a cgroup's
/// name is longer than a command's).
pub(super) fn columns(width: u16, by_cgroup: bool) -> (Vec<&'static Column>, Vec<u16>) {
    let mut shown: Vec<&Column> = COLUMNS
        .iter()
        .filter(|c| width >= c.min_pane_width)
        // Cgroup rows make room for their names: the maxima and the median sync latency go
        // (their percentiles are coarse anyway), and the per-process cgroup column.
        .filter(|c| !by_cgroup || !matches!(c.header, "max" | "S.p50" | "S.max" | "CGROUP"))
        .collect();
    let widths = |cols: &[&Column]| cols.iter().map(|c| c.width).collect::<Vec<u16>>();
    while table::total_width(&widths(&shown)) > usize::from(width) {
        let Some((at, _)) = shown
            .iter()
            .enumerate()
            .filter(|(_, c)| c.min_pane_width > 0)
            .max_by_key(|(i, c)| (c.min_pane_width, *i))
        else {
            break;
        };
        shown.remove(at);
    }
    let mut w = widths(&shown);
    if by_cgroup {
        let spare = usize::from(width).saturating_sub(table::total_width(&w));
        for (c, w) in shown.iter().zip(&mut w) {
            if c.header == "COMM" {
                *w += u16::try_from(spare.min(8)).unwrap_or(0);
            }
        }
    }
    (shown, w)
}

/// The sort keys whose column is on screen in a pane `width` wide, in column order, with
/// the default (read and write MB/s together, named in the title) after the write MB/s.
pub fn sort_keys(width: u16, by_cgroup: bool) -> Vec<SortKey> {
    let mut keys = Vec::new();
    for c in columns(width, by_cgroup).0 {
        if let Some(key) = c.sort {
            keys.push(key);
            if key == SortKey::WriteBytes {
                keys.push(SortKey::TotalBytes);
            }
        }
    }
    keys
}

/// The narrowest pane that shows `key`'s column (`None`: it is shown at any width).
pub(super) fn sort_column_from(key: SortKey, by_cgroup: bool) -> Option<u16> {
    let has = |w: u16| key == SortKey::TotalBytes || sort_keys(w, by_cgroup).contains(&key);
    if has(MIN_WIDTH) {
        return None;
    }
    (MIN_WIDTH..=WIDEST_THRESHOLD).find(|&w| has(w))
}

/// Every column is shown from here.
const WIDEST_THRESHOLD: u16 = 400;

/// The narrowest pane drawn (`view::MIN_WIDTH`).
const MIN_WIDTH: u16 = super::super::MIN_WIDTH;
