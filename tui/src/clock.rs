//! The clocks, in one place: `CLOCK_MONOTONIC` (the probes' clock: every timestamp of a
//! record and a sample), the wall clock (a run's start, a capture's name), and how a wall
//! clock time is written (RFC 3339, a time of day). Timers (tokio's, the workloads' pacing)
//! aside, nothing else reads a clock; the model reads none at all (time enters it through
//! its inputs).

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    #[expect(clippy::cast_sign_loss, reason = "CLOCK_MONOTONIC is never negative")]
    let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    ns
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

/// The UTC time of day, `HH:MM:SS`, of milliseconds since the epoch.
pub fn time_of_day(unix_ms: u64) -> String {
    let s = unix_ms / 1000 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
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

    #[test]
    fn time_of_day_is_utc() {
        assert_eq!(time_of_day(1_795_305_601_250), "00:00:01");
        assert_eq!(time_of_day(3_723_000), "01:02:03");
    }
}
