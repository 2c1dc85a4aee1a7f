//! Block device names and busy time from sysfs and procfs.

use std::{fs, path::Path};

use crate::model::{Dev, DiskStat};

/// `(dev, name)` for every block device, from `/sys/block/*/dev` and the partitions below.
pub fn block_device_names() -> Vec<(Dev, String)> {
    let mut names = Vec::new();
    let Ok(entries) = fs::read_dir("/sys/class/block") else {
        return names;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Ok(text) = fs::read_to_string(entry.path().join("dev"))
            && let Some(dev) = parse_dev(&text)
        {
            names.push((dev, name));
        }
    }
    names.sort();
    names
}

/// The I/O scheduler of each disk that has one (`[mq-deadline]` in `queue/scheduler`;
/// `none` and devices without a queue are left out).
pub fn schedulers(names: &[(Dev, String)]) -> Vec<(Dev, String)> {
    names
        .iter()
        .filter_map(|(dev, name)| {
            let text =
                fs::read_to_string(format!("/sys/class/block/{name}/queue/scheduler")).ok()?;
            Some((*dev, active_scheduler(&text)?))
        })
        .collect()
}

/// `"none [mq-deadline] kyber"` -> `mq-deadline`; `None` for `none`.
fn active_scheduler(text: &str) -> Option<String> {
    let active = text
        .split_whitespace()
        .find_map(|s| s.strip_prefix('[')?.strip_suffix(']'))?;
    (active != "none").then(|| active.to_string())
}

/// `"7:0\n"` -> `Dev { 7, 0 }`.
pub fn parse_dev(text: &str) -> Option<Dev> {
    let (major, minor) = text.trim().split_once(':')?;
    Some(Dev::new(major.parse().ok()?, minor.parse().ok()?))
}

/// `io_ticks` of every device in `/proc/diskstats`.
pub fn diskstats() -> Vec<DiskStat> {
    fs::read_to_string("/proc/diskstats")
        .map(|text| parse_diskstats(&text))
        .unwrap_or_default()
}

/// Fields: major minor name reads reads_merged ... writes writes_merged ...; io_ticks (ms
/// busy) is the 13th column.
pub fn parse_diskstats(text: &str) -> Vec<DiskStat> {
    text.lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            Some(DiskStat {
                dev: Dev::new(cols.first()?.parse().ok()?, cols.get(1)?.parse().ok()?),
                io_ticks_ms: cols.get(12)?.parse().ok()?,
                read_merges: cols.get(4)?.parse().ok()?,
                write_merges: cols.get(8)?.parse().ok()?,
            })
        })
        .collect()
}

/// The whole disk a (partition) device belongs to: block tracepoints report requests against
/// the disk, files report their partition. Devices that are not partitions map to themselves.
pub fn whole_disk(dev: Dev) -> Dev {
    let dir = Path::new("/sys/dev/block").join(dev.to_string());
    if !dir.join("partition").exists() {
        return dev;
    }
    fs::canonicalize(&dir)
        .ok()
        .and_then(|part| part.parent().map(|disk| disk.join("dev")))
        .and_then(|file| fs::read_to_string(file).ok())
        .and_then(|text| parse_dev(&text))
        .unwrap_or(dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_scheduler_is_the_bracketed_one_unless_none() {
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq\n").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(active_scheduler("[none] mq-deadline kyber bfq\n"), None);
        assert_eq!(active_scheduler("none\n"), None);
    }

    #[test]
    fn parses_dev_files() {
        assert_eq!(parse_dev("7:0\n"), Some(Dev::new(7, 0)));
        assert_eq!(parse_dev("259:12"), Some(Dev::new(259, 12)));
        assert_eq!(parse_dev("garbage"), None);
    }

    #[test]
    fn parses_diskstats() {
        let text = "   7       0 loop0 112 3 3242 5 1002 17 8016 1234 0 777 1239 0 0 0 0 0 0\n 254       0 vda 9 1 2 3\n";
        let stats = parse_diskstats(text);
        assert_eq!(
            stats,
            vec![DiskStat {
                dev: Dev::new(7, 0),
                io_ticks_ms: 777,
                read_merges: 3,
                write_merges: 17,
            }]
        );
    }
}
