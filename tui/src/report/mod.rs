//! Headless output: the batch text report (like `iotop -b`) and the JSON contract.

pub mod html;
pub mod json;
pub mod svg;
pub mod text;
pub mod timeline;

use crate::model::{ProcRow, Snapshot};

/// Which processes a report lists: those with I/O in the interval (like `iotop -o`), optionally
/// only some pids, busiest first (bytes, then requests, then pid for a stable order).
pub fn active_procs<'a>(snap: &'a Snapshot, pids: &[u32]) -> Vec<&'a ProcRow> {
    let mut procs: Vec<&ProcRow> = snap
        .procs
        .iter()
        .filter(|p| {
            p.interval.ios() > 0
                || p.interval.writeback_bytes > 0
                || p.interval.sync.syncs > 0
                || p.interval.sync.charged_write_bytes > 0
                || p.interval.dstate_ns > 0
                || p.interval.waited()
        })
        .filter(|p| pids.is_empty() || pids.contains(&p.tgid))
        .collect();
    procs.sort_by(|a, b| {
        b.interval
            .bytes_caused()
            .cmp(&a.interval.bytes_caused())
            .then(b.interval.ios().cmp(&a.interval.ios()))
            .then(a.tgid.cmp(&b.tgid))
    });
    procs
}

/// `seconds since the Unix epoch` -> `YYYY-MM-DDTHH:MM:SS.mmmZ` (RFC 3339, UTC).
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        unix_ms % 1000
    )
}

/// Days since 1970-01-01 -> (year, month, day); Howard Hinnant's algorithm.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_305_601_250), "2026-11-22T00:00:01.250Z");
    }
}
