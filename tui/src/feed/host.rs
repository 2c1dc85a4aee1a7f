//! Host-wide figures for the header, the first things Brendan Gregg's 60-second analysis looks
//! at: load, the run queue, tasks blocked on I/O, CPU time in iowait, I/O pressure, and dirty
//! memory waiting to be written.
//!
//! Only raw values are read here, cumulative (`/proc/stat` jiffies) or instantaneous (the
//! rest), exactly as the kernel prints them; the model turns them into rates. A file or a
//! field that is missing or unreadable gives `None`, never a panic and never a zero: a kernel
//! without PSI simply has no pressure figures.

use std::fs;

use crate::model::{CpuJiffies, HostSample, LoadAvg};

const LOADAVG: &str = "/proc/loadavg";
const STAT: &str = "/proc/stat";
const PRESSURE_IO: &str = "/proc/pressure/io";
const MEMINFO: &str = "/proc/meminfo";

/// Reads every source now. Costs a few reads of small procfs files (`/proc/stat` grows with
/// the number of CPUs and interrupts: tens of KiB on big hosts), once per interval.
pub fn sample() -> HostSample {
    let read = |path: &str| fs::read_to_string(path).ok();
    let stat = read(STAT).map(|text| parse_stat(&text)).unwrap_or_default();
    let pressure = read(PRESSURE_IO)
        .map(|text| parse_pressure(&text))
        .unwrap_or_default();
    let memory = read(MEMINFO)
        .map(|text| parse_meminfo(&text))
        .unwrap_or_default();
    HostSample {
        load: read(LOADAVG).and_then(|text| parse_loadavg(&text)),
        procs_running: stat.procs_running,
        procs_blocked: stat.procs_blocked,
        cpu: stat.cpu,
        psi_io_some_avg10_hundredths: pressure.some_avg10,
        psi_io_full_avg10_hundredths: pressure.full_avg10,
        dirty_bytes: memory.dirty_bytes,
        writeback_bytes: memory.writeback_bytes,
    }
}

/// What the header will lack on this host, and why (for the degraded notes and `check`).
pub fn notes() -> Vec<String> {
    let mut notes = Vec::new();
    // Without CONFIG_PSI the file is absent; with psi=0 on the kernel command line (or
    // CONFIG_PSI_DEFAULT_DISABLED) it exists and reading it fails with EOPNOTSUPP.
    if let Err(e) = fs::read_to_string(PRESSURE_IO) {
        notes.push(format!(
            "no I/O pressure in the header: cannot read {PRESSURE_IO} ({e}; the kernel needs CONFIG_PSI, and psi=1 on the command line where it is off by default)"
        ));
    }
    notes
}

/// `"2.10 1.50 0.80 3/412 12345"`: the first three fields, in hundredths (the kernel prints
/// exactly two decimals, so nothing is lost).
pub fn parse_loadavg(text: &str) -> Option<LoadAvg> {
    let mut fields = text.split_whitespace();
    let mut next = || fields.next().and_then(parse_hundredths);
    Some(LoadAvg {
        one_hundredths: next()?,
        five_hundredths: next()?,
        fifteen_hundredths: next()?,
    })
}

/// What `/proc/stat` gives the header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub procs_running: Option<u32>,
    pub procs_blocked: Option<u32>,
    pub cpu: Option<CpuJiffies>,
}

/// The aggregate `cpu` line (jiffies in `USER_HZ`, cumulative since boot) and the
/// `procs_running` / `procs_blocked` lines. Per-CPU lines (`cpu0`, ...) are ignored.
pub fn parse_stat(text: &str) -> Stat {
    let mut stat = Stat::default();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("cpu") => stat.cpu = parse_cpu_fields(fields),
            Some("procs_running") => {
                stat.procs_running = fields.next().and_then(|v| v.parse().ok())
            }
            Some("procs_blocked") => {
                stat.procs_blocked = fields.next().and_then(|v| v.parse().ok())
            }
            _ => {}
        }
    }
    stat
}

/// `user nice system idle iowait irq softirq steal [guest guest_nice]`. The first four are
/// in every kernel; iowait, irq, softirq and steal came later (2.5.41 to 2.6.11) and are
/// taken as 0 when a kernel that old omits them. Guest time is already counted in user and
/// nice, so it is not read.
fn parse_cpu_fields<'a>(fields: impl Iterator<Item = &'a str>) -> Option<CpuJiffies> {
    let values: Vec<u64> = fields
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if values.len() < 4 {
        return None;
    }
    let at = |i: usize| values.get(i).copied().unwrap_or(0);
    Some(CpuJiffies {
        user: at(0),
        nice: at(1),
        system: at(2),
        idle: at(3),
        iowait: at(4),
        irq: at(5),
        softirq: at(6),
        steal: at(7),
    })
}

/// The ten-second averages of `/proc/pressure/io`, in hundredths of a percent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pressure {
    pub some_avg10: Option<u32>,
    pub full_avg10: Option<u32>,
}

/// `some avg10=12.34 avg60=... total=...` and the same for `full`.
pub fn parse_pressure(text: &str) -> Pressure {
    let mut pressure = Pressure::default();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let slot = match fields.next() {
            Some("some") => &mut pressure.some_avg10,
            Some("full") => &mut pressure.full_avg10,
            _ => continue,
        };
        *slot = fields
            .find_map(|field| field.strip_prefix("avg10="))
            .and_then(parse_hundredths);
    }
    pressure
}

/// Dirty memory, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    pub dirty_bytes: Option<u64>,
    pub writeback_bytes: Option<u64>,
}

/// `Dirty:` and `Writeback:` of `/proc/meminfo` (printed in KiB, whatever the `kB` says).
/// `WritebackTmp:` is a different line and is not confused with `Writeback:`.
pub fn parse_meminfo(text: &str) -> Memory {
    let mut memory = Memory::default();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let slot = match name.trim() {
            "Dirty" => &mut memory.dirty_bytes,
            "Writeback" => &mut memory.writeback_bytes,
            _ => continue,
        };
        let mut fields = rest.split_whitespace();
        *slot = match (fields.next(), fields.next()) {
            (Some(kib), Some("kB")) => kib
                .parse::<u64>()
                .ok()
                .and_then(|kib| kib.checked_mul(1024)),
            _ => None,
        };
    }
    memory
}

/// `"12.34"` -> 1234, `"7"` -> 700, `"0.5"` -> 50. Exact: the kernel prints load and
/// pressure averages with two decimals. Anything else (a sign, a third decimal, letters)
/// is refused.
pub fn parse_hundredths(text: &str) -> Option<u32> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) if digits(fraction) && fraction.len() <= 2 => (whole, fraction),
        Some(_) => return None,
        None => (text, ""),
    };
    if !digits(whole) {
        return None;
    }
    let fraction: u32 = match fraction.len() {
        0 => 0,
        1 => fraction.parse::<u32>().ok()? * 10,
        _ => fraction.parse().ok()?,
    };
    whole
        .parse::<u32>()
        .ok()?
        .checked_mul(100)?
        .checked_add(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// From a 2-CPU VM running a build (6.18): per-CPU lines, the long `intr` line, and the
    /// procs lines after it.
    const STAT_TEXT: &str = "\
cpu  589457 218 178317 1020372 28391 0 21091 323 0 0
cpu0 294301 102 89412 509921 14012 0 15230 161 0 0
cpu1 295156 116 88905 510451 14379 0 5861 162 0 0
intr 86436275 33 9 0 0 0 0 0 0 0 0 0 0 156 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
ctxt 160954371
btime 1795300000
processes 1077012
procs_running 3
procs_blocked 1
softirq 40232511 1 11838102 31 4283612 181032 0 13322 15089320 0 8840413
";

    #[test]
    fn stat_gives_the_aggregate_cpu_line_and_the_procs() {
        let stat = parse_stat(STAT_TEXT);
        assert_eq!(stat.procs_running, Some(3));
        assert_eq!(stat.procs_blocked, Some(1));
        assert_eq!(
            stat.cpu,
            Some(CpuJiffies {
                user: 589_457,
                nice: 218,
                system: 178_317,
                idle: 1_020_372,
                iowait: 28_391,
                irq: 0,
                softirq: 21_091,
                steal: 323,
            }),
            "the aggregate line, not cpu0's"
        );
    }

    #[test]
    fn stat_without_procs_lines_or_with_a_broken_cpu_line_gives_none() {
        let stat = parse_stat("cpu  1 2 3\ncpu0 1 2 3 4 5 6 7 8\n");
        assert_eq!(stat, Stat::default(), "three fields are too few");
        let stat = parse_stat("cpu  1 2 x 4 5 6 7 8\nprocs_running\nprocs_blocked -1\n");
        assert_eq!(stat, Stat::default());
        assert_eq!(parse_stat(""), Stat::default());
    }

    #[test]
    fn an_old_cpu_line_without_steal_counts_it_as_zero() {
        let stat = parse_stat("cpu  10 0 5 100 2 1 1\n");
        let cpu = stat.cpu.unwrap();
        assert_eq!((cpu.iowait, cpu.softirq, cpu.steal), (2, 1, 0));
    }

    #[test]
    fn loadavg_in_hundredths() {
        assert_eq!(
            parse_loadavg("2.10 1.50 0.08 3/412 17562\n"),
            Some(LoadAvg {
                one_hundredths: 210,
                five_hundredths: 150,
                fifteen_hundredths: 8,
            })
        );
        assert_eq!(
            parse_loadavg("123.45 99.00 7.77 1/1 1").map(|l| l.one_hundredths),
            Some(12_345)
        );
        assert_eq!(parse_loadavg("2.10 1.50"), None);
        assert_eq!(parse_loadavg(""), None);
        assert_eq!(parse_loadavg("load average: 1 2 3"), None);
    }

    #[test]
    fn pressure_some_and_full() {
        let text = "some avg10=12.34 avg60=8.31 avg300=5.35 total=298636158\n\
                    full avg10=3.00 avg60=4.86 avg300=3.27 total=184353654\n";
        assert_eq!(
            parse_pressure(text),
            Pressure {
                some_avg10: Some(1234),
                full_avg10: Some(300),
            }
        );
    }

    #[test]
    fn pressure_without_a_full_line_or_with_garbage_gives_none_for_it() {
        let text = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(
            parse_pressure(text),
            Pressure {
                some_avg10: Some(0),
                full_avg10: None,
            }
        );
        let text = "some avg10=-1 avg60=0.00\nfull avg60=1.00 total=3\n";
        assert_eq!(parse_pressure(text), Pressure::default());
        assert_eq!(parse_pressure(""), Pressure::default());
    }

    #[test]
    fn meminfo_dirty_and_writeback_in_bytes() {
        let text = "\
MemTotal:       24684084 kB
MemFree:         1234567 kB
Dirty:             40960 kB
Writeback:          2048 kB
AnonPages:        123456 kB
WritebackTmp:       9999 kB
";
        assert_eq!(
            parse_meminfo(text),
            Memory {
                dirty_bytes: Some(40 << 20),
                writeback_bytes: Some(2 << 20),
            },
            "WritebackTmp is not Writeback"
        );
    }

    #[test]
    fn meminfo_without_the_lines_or_with_a_bad_unit_gives_none() {
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), Memory::default());
        assert_eq!(
            parse_meminfo("Dirty: 12 pages\nWriteback: x kB\n"),
            Memory::default()
        );
        assert_eq!(parse_meminfo(""), Memory::default());
    }

    #[test]
    fn hundredths_are_exact_and_refuse_what_the_kernel_never_prints() {
        assert_eq!(parse_hundredths("0.00"), Some(0));
        assert_eq!(parse_hundredths("12.34"), Some(1234));
        assert_eq!(parse_hundredths("0.5"), Some(50));
        assert_eq!(parse_hundredths("7"), Some(700));
        for bad in [
            "",
            ".",
            "1.",
            ".5",
            "1.234",
            "-1.00",
            "+1",
            "1e3",
            "x",
            "99999999.00",
        ] {
            assert_eq!(parse_hundredths(bad), None, "{bad:?}");
        }
    }

    /// The files of the machine the tests run on parse, whatever it is: `/proc/loadavg`,
    /// `/proc/stat` and `/proc/meminfo` exist on every Linux with procfs.
    #[test]
    fn this_host_parses() {
        let host = sample();
        assert!(host.load.is_some(), "{host:?}");
        assert!(host.procs_running.is_some_and(|n| n >= 1), "{host:?}");
        assert!(host.procs_blocked.is_some(), "{host:?}");
        assert!(host.cpu.is_some(), "{host:?}");
        assert!(host.dirty_bytes.is_some() && host.writeback_bytes.is_some());
        // Pressure is optional: present exactly when the file reads.
        assert_eq!(
            host.psi_io_some_avg10_hundredths.is_some(),
            fs::read_to_string(PRESSURE_IO).is_ok()
        );
    }
}
