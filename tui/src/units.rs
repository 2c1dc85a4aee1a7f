//! Unit conversions for display (the model keeps ns and bytes).

#[expect(clippy::cast_precision_loss, reason = "display values")]
pub fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

#[expect(clippy::cast_precision_loss, reason = "display values")]
pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub fn mib(bytes_per_s: f64) -> f64 {
    bytes_per_s / (1024.0 * 1024.0)
}

pub use crate::model::quantity::latency;

/// A byte rate, short: `512B`, `4.0K`, `12M`, `1.2G` (binary units, per second implied).
pub fn bytes(n: f64) -> String {
    const K: f64 = 1024.0;
    match n {
        n if n < 1.0 => "0".to_string(),
        n if n < K => format!("{n:.0}B"),
        n if n < 10.0 * K => format!("{:.1}K", n / K),
        n if n < K * K => format!("{:.0}K", n / K),
        n if n < 10.0 * K * K => format!("{:.1}M", n / K / K),
        n if n < K * K * K => format!("{:.0}M", n / K / K),
        n => format!("{:.1}G", n / K / K / K),
    }
}

/// A count, short: `7`, `950`, `1.2k`, `34k`, `1.1M`.
pub fn count(n: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let f = n as f64;
    match n {
        0..1_000 => n.to_string(),
        1_000..10_000 => format!("{:.1}k", f / 1e3),
        10_000..1_000_000 => format!("{:.0}k", f / 1e3),
        _ => format!("{:.1}M", f / 1e6),
    }
}

/// Seconds as `h:mm:ss`.
pub fn elapsed(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_rates_are_short() {
        assert_eq!(bytes(0.0), "0");
        assert_eq!(bytes(512.0), "512B");
        assert_eq!(bytes(4096.0), "4.0K");
        assert_eq!(bytes(4096.0 * 1000.0), "3.9M");
        assert_eq!(bytes(200.0 * 1024.0 * 1024.0), "200M");
        assert_eq!(bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0G");
    }

    #[test]
    fn elapsed_is_clock_like() {
        assert_eq!(elapsed(3_723_000_000_000), "1:02:03");
    }

    #[test]
    fn counts_are_short() {
        assert_eq!(count(950), "950");
        assert_eq!(count(1_234), "1.2k");
        assert_eq!(count(34_000), "34k");
        assert_eq!(count(1_100_000), "1.1M");
    }
}
