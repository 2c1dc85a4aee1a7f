//! Quantities written into findings' text: a latency or a byte count in the unit that keeps
//! it short. Pure formatting of numbers (the views format rates and columns themselves).

/// A latency in the unit that keeps it short: `850ns`, `12us`, `3.4ms`, `1.20s`.
#[expect(clippy::cast_precision_loss, reason = "display values")]
pub fn latency(ns: u64) -> String {
    let us = ns as f64 / 1e3;
    let ms = ns as f64 / 1e6;
    match ns {
        0 => "0".to_string(),
        1..1_000 => format!("{ns}ns"),
        1_000..10_000 => format!("{us:.1}us"),
        10_000..1_000_000 => format!("{us:.0}us"),
        1_000_000..10_000_000 => format!("{ms:.1}ms"),
        10_000_000..1_000_000_000 => format!("{ms:.0}ms"),
        _ => format!("{:.2}s", ms / 1e3),
    }
}

/// A byte count with a binary unit: `128 B`, `4 KiB`, `12.4 KiB`, `2 MiB`, `1.5 GiB`.
#[expect(clippy::cast_precision_loss, reason = "display values")]
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if (value - value.round()).abs() < 0.05 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A ratio as `131x`, `1.1x`.
pub fn times(ratio: f64) -> String {
    if ratio >= 10.0 {
        format!("{ratio:.0}x")
    } else {
        format!("{ratio:.1}x")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_are_short() {
        assert_eq!(latency(0), "0");
        assert_eq!(latency(850), "850ns");
        assert_eq!(latency(1_500), "1.5us");
        assert_eq!(latency(120_000), "120us");
        assert_eq!(latency(3_400_000), "3.4ms");
        assert_eq!(latency(64_000_000), "64ms");
        assert_eq!(latency(1_200_000_000), "1.20s");
    }

    #[test]
    fn byte_counts_are_short() {
        assert_eq!(bytes(128), "128 B");
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(12_700), "12.4 KiB");
        assert_eq!(bytes(2 << 20), "2 MiB");
        assert_eq!(bytes(3 << 30), "3 GiB");
    }

    #[test]
    fn ratios() {
        assert_eq!(times(131.4), "131x");
        assert_eq!(times(1.06), "1.1x");
    }
}
