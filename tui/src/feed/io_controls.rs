//! A process's cgroup and the I/O controls on its way, for the throttling finding: cgroup v1
//! `blkio.throttle.{read,write}_{bps,iops}_device`, cgroup v2 `io.max` (and whether iocost
//! or io.latency is configured), in its cgroup and every ancestor up to the hierarchy's root.
//! Read from /proc and the cgroup filesystems, cached a few seconds per process.

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
};

use crate::model::{Dev, IoLimit, IoLimits, LimitKind};

/// A process's cgroup and limits are read again after this long (limits change rarely).
const TTL_NS: u64 = 5_000_000_000;
/// Processes cached at most (then the cache starts over).
const MAX_CACHED: usize = 4_096;

/// Where the cgroup hierarchies that carry I/O controls are mounted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupMounts {
    /// The v1 hierarchy with the `blkio` controller.
    pub blkio: Option<PathBuf>,
    /// The v2 (unified) hierarchy.
    pub unified: Option<PathBuf>,
}

/// The cgroup mounts in a `/proc/self/mountinfo` text.
pub fn parse_mounts(mountinfo: &str) -> CgroupMounts {
    let mut mounts = CgroupMounts::default();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount_point) = left.split_whitespace().nth(4) else {
            continue;
        };
        let mut right = right.split_whitespace();
        let (Some(fstype), _, Some(options)) = (right.next(), right.next(), right.next()) else {
            continue;
        };
        let path = PathBuf::from(super::mounts::unescape(mount_point));
        match fstype {
            "cgroup" if options.split(',').any(|o| o == "blkio") => {
                mounts.blkio.get_or_insert(path);
            }
            "cgroup2" => {
                mounts.unified.get_or_insert(path);
            }
            _ => {}
        }
    }
    mounts
}

/// The v1 blkio path and the v2 path of a `/proc/PID/cgroup` text.
pub fn parse_proc_cgroup(text: &str) -> (Option<String>, Option<String>) {
    let (mut blkio, mut unified) = (None, None);
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            unified = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "blkio") {
            blkio = Some(path.to_string());
        }
    }
    (blkio, unified)
}

fn parse_dev(text: &str) -> Option<Dev> {
    let (major, minor) = text.split_once(':')?;
    Some(Dev::new(major.parse().ok()?, minor.parse().ok()?))
}

/// A v1 `blkio.throttle.*_device` file: `major:minor value` lines (0: no limit).
pub fn parse_v1_throttle(text: &str, kind: LimitKind, file: &str) -> Vec<IoLimit> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let dev = parse_dev(words.next()?)?;
            let value: u64 = words.next()?.parse().ok()?;
            (value > 0).then(|| IoLimit {
                dev,
                kind,
                value,
                file: file.to_string(),
            })
        })
        .collect()
}

/// A v2 `io.max` file: `major:minor rbps=N wbps=max riops=N wiops=N` lines.
pub fn parse_io_max(text: &str, file: &str) -> Vec<IoLimit> {
    let mut limits = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(dev) = words.next().and_then(parse_dev) else {
            continue;
        };
        for word in words {
            let Some((key, value)) = word.split_once('=') else {
                continue;
            };
            let kind = match key {
                "rbps" => LimitKind::ReadBps,
                "wbps" => LimitKind::WriteBps,
                "riops" => LimitKind::ReadIops,
                "wiops" => LimitKind::WriteIops,
                _ => continue,
            };
            if let Ok(value) = value.parse::<u64>() {
                limits.push(IoLimit {
                    dev,
                    kind,
                    value,
                    file: file.to_string(),
                });
            }
        }
    }
    limits
}

/// Disks with iocost enabled in a v2 root `io.cost.qos`.
pub fn parse_iocost_qos(text: &str) -> Vec<Dev> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let dev = parse_dev(words.next()?)?;
            words.any(|w| w == "enable=1").then_some(dev)
        })
        .collect()
}

/// io.latency targets (us) in a v2 `io.latency`.
pub fn parse_io_latency(text: &str) -> Vec<(Dev, u64)> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let dev = parse_dev(words.next()?)?;
            let target = words.find_map(|w| w.strip_prefix("target="))?;
            Some((dev, target.parse().ok()?))
        })
        .collect()
}

/// `dir` and its ancestors up to `root` (inclusive), nearest first.
fn up_to(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut at = Some(dir);
    while let Some(dir) = at {
        if !dir.starts_with(root) {
            break;
        }
        out.push(dir.to_path_buf());
        if dir == root {
            break;
        }
        at = dir.parent();
    }
    out
}

fn join(root: &Path, cgroup: &str) -> PathBuf {
    root.join(cgroup.trim_start_matches('/'))
}

/// Reads what controls the I/O of a process in these cgroups.
pub fn read_limits(
    tgid: u32,
    mounts: &CgroupMounts,
    blkio: Option<&str>,
    unified: Option<&str>,
) -> IoLimits {
    let mut out = IoLimits {
        tgid,
        ..IoLimits::default()
    };
    let read = |path: &Path| fs::read_to_string(path).unwrap_or_default();
    if let (Some(root), Some(cgroup)) = (&mounts.blkio, blkio) {
        out.cgroup = format!("blkio:{cgroup}");
        for dir in up_to(root, &join(root, cgroup)) {
            for kind in [
                LimitKind::ReadBps,
                LimitKind::WriteBps,
                LimitKind::ReadIops,
                LimitKind::WriteIops,
            ] {
                let file = dir.join(format!("blkio.throttle.{}_device", kind.name()));
                out.limits.extend(parse_v1_throttle(
                    &read(&file),
                    kind,
                    &file.to_string_lossy(),
                ));
            }
        }
    }
    if let (Some(root), Some(cgroup)) = (&mounts.unified, unified) {
        if out.cgroup.is_empty() {
            out.cgroup = cgroup.to_string();
        } else if cgroup != "/" {
            out.cgroup = format!("{}, {cgroup}", out.cgroup);
        }
        for dir in up_to(root, &join(root, cgroup)) {
            let file = dir.join("io.max");
            out.limits
                .extend(parse_io_max(&read(&file), &file.to_string_lossy()));
            out.iolatency
                .extend(parse_io_latency(&read(&dir.join("io.latency"))));
        }
        out.iocost = parse_iocost_qos(&read(&root.join("io.cost.qos")));
    }
    out
}

/// Directories looked at, at most, by one [`any_io_control`] scan.
const MAX_SCANNED_DIRS: usize = 4_096;

/// Whether any I/O control is configured anywhere in the hierarchies: a non-zero v1
/// `blkio.throttle.*_device` line, a v2 `io.max` or `io.latency` line, or iocost enabled.
/// Looks at [`MAX_SCANNED_DIRS`] directories at most, shallowest first.
pub fn any_io_control(mounts: &CgroupMounts) -> bool {
    let read = |path: &Path| fs::read_to_string(path).unwrap_or_default();
    let mut scanned = 0;
    let mut walk = |root: &Path, found: &mut dyn FnMut(&Path) -> bool| -> bool {
        let mut queue = std::collections::VecDeque::from([root.to_path_buf()]);
        while let Some(dir) = queue.pop_front() {
            if scanned >= MAX_SCANNED_DIRS {
                return false;
            }
            scanned += 1;
            if found(&dir) {
                return true;
            }
            if let Ok(entries) = fs::read_dir(&dir) {
                queue.extend(
                    entries
                        .filter_map(Result::ok)
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        false
    };
    if let Some(root) = &mounts.blkio {
        let v1 = |dir: &Path| {
            [
                LimitKind::ReadBps,
                LimitKind::WriteBps,
                LimitKind::ReadIops,
                LimitKind::WriteIops,
            ]
            .into_iter()
            .any(|kind| {
                let file = dir.join(format!("blkio.throttle.{}_device", kind.name()));
                !parse_v1_throttle(&read(&file), kind, "").is_empty()
            })
        };
        if walk(root, &mut |dir| v1(dir)) {
            return true;
        }
    }
    if let Some(root) = &mounts.unified {
        if !parse_iocost_qos(&read(&root.join("io.cost.qos"))).is_empty() {
            return true;
        }
        let v2 = |dir: &Path| {
            parse_io_max(&read(&dir.join("io.max")), "")
                .iter()
                .any(|l| l.value > 0)
                || !parse_io_latency(&read(&dir.join("io.latency"))).is_empty()
        };
        if walk(root, &mut |dir| v2(dir)) {
            return true;
        }
    }
    false
}

/// The cgroup hierarchies of this host (from `/proc/self/mountinfo`).
pub fn host_mounts() -> CgroupMounts {
    parse_mounts(&fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

/// Per process: its name, cgroup and limits, looked up at most every [`TTL_NS`].
#[derive(Default)]
pub struct CgroupBook {
    mounts: Option<CgroupMounts>,
    cached: HashMap<u32, (u64, String, IoLimits)>,
}

impl CgroupBook {
    /// `(comm, limits)` of `tgid`; `None` when it is gone.
    pub fn of(&mut self, tgid: u32, now_ns: u64) -> Option<(String, IoLimits)> {
        if let Some((at, comm, limits)) = self.cached.get(&tgid)
            && now_ns.saturating_sub(*at) < TTL_NS
        {
            return Some((comm.clone(), limits.clone()));
        }
        let mounts = self.mounts.get_or_insert_with(host_mounts);
        let (blkio, unified) =
            parse_proc_cgroup(&fs::read_to_string(format!("/proc/{tgid}/cgroup")).ok()?);
        let comm = fs::read_to_string(format!("/proc/{tgid}/comm"))
            .map(|c| c.trim_end().to_string())
            .unwrap_or_default();
        let limits = read_limits(tgid, mounts, blkio.as_deref(), unified.as_deref());
        if self.cached.len() >= MAX_CACHED {
            self.cached.clear();
        }
        self.cached
            .insert(tgid, (now_ns, comm.clone(), limits.clone()));
        Some((comm, limits))
    }

    pub fn forget(&mut self, tgid: u32) {
        self.cached.remove(&tgid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_of_a_hybrid_host() {
        let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755
35 30 0:31 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
38 30 0:34 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
41 30 0:37 / /sys/fs/cgroup/blkio rw,nosuid - cgroup cgroup rw,blkio
";
        assert_eq!(
            parse_mounts(mountinfo),
            CgroupMounts {
                blkio: Some("/sys/fs/cgroup/blkio".into()),
                unified: Some("/sys/fs/cgroup/unified".into()),
            }
        );
        assert_eq!(parse_mounts("garbage\n\n"), CgroupMounts::default());
    }

    #[test]
    fn proc_cgroup_lines() {
        let text = "9:name=systemd:/\n7:blkio:/db/slow\n4:memory:/x\n0::/system.slice/db.service\n";
        assert_eq!(
            parse_proc_cgroup(text),
            (
                Some("/db/slow".into()),
                Some("/system.slice/db.service".into())
            )
        );
        assert_eq!(parse_proc_cgroup("0::/\n"), (None, Some("/".into())));
        assert_eq!(parse_proc_cgroup("nonsense"), (None, None));
    }

    #[test]
    fn v1_throttle_files() {
        let limits = parse_v1_throttle("7:0 800\n8:0 0\nbad line\n", LimitKind::WriteIops, "f");
        assert_eq!(
            limits,
            vec![IoLimit {
                dev: Dev::new(7, 0),
                kind: LimitKind::WriteIops,
                value: 800,
                file: "f".into()
            }]
        );
    }

    #[test]
    fn v2_io_max_and_friends() {
        let limits = parse_io_max("8:16 rbps=2097152 wbps=max riops=max wiops=120\n", "io.max");
        let got: Vec<(LimitKind, u64)> = limits.iter().map(|l| (l.kind, l.value)).collect();
        assert_eq!(
            got,
            vec![(LimitKind::ReadBps, 2_097_152), (LimitKind::WriteIops, 120)]
        );
        assert!(limits.iter().all(|l| l.dev == Dev::new(8, 16)));
        assert_eq!(
            parse_iocost_qos(
                "8:16 enable=1 ctrl=auto rpct=95.00 rlat=5000\n8:32 enable=0 ctrl=auto\n"
            ),
            vec![Dev::new(8, 16)]
        );
        assert_eq!(
            parse_io_latency("8:16 target=75000\n"),
            vec![(Dev::new(8, 16), 75_000)]
        );
    }

    #[test]
    fn ancestors_up_to_the_root() {
        let root = Path::new("/sys/fs/cgroup/blkio");
        assert_eq!(
            up_to(root, &join(root, "/a/b")),
            vec![
                PathBuf::from("/sys/fs/cgroup/blkio/a/b"),
                PathBuf::from("/sys/fs/cgroup/blkio/a"),
                PathBuf::from("/sys/fs/cgroup/blkio"),
            ]
        );
        assert_eq!(up_to(root, &join(root, "/")), vec![PathBuf::from(root)]);
    }

    #[test]
    fn limits_read_from_a_cgroup_tree() {
        let dir = std::env::temp_dir().join(format!("iotop-bpf-cgroup-{}", std::process::id()));
        let blkio = dir.join("blkio");
        let unified = dir.join("unified");
        fs::create_dir_all(blkio.join("db")).unwrap();
        fs::create_dir_all(unified.join("svc")).unwrap();
        fs::write(
            blkio.join("db/blkio.throttle.write_iops_device"),
            "7:3 800\n",
        )
        .unwrap();
        fs::write(
            blkio.join("blkio.throttle.read_bps_device"),
            "7:3 1048576\n",
        )
        .unwrap();
        fs::write(
            unified.join("svc/io.max"),
            "7:3 rbps=max wbps=4096 riops=max wiops=max\n",
        )
        .unwrap();
        fs::write(unified.join("io.cost.qos"), "7:3 enable=1 ctrl=auto\n").unwrap();
        let mounts = CgroupMounts {
            blkio: Some(blkio.clone()),
            unified: Some(unified.clone()),
        };
        let limits = read_limits(42, &mounts, Some("/db"), Some("/svc"));
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(limits.cgroup, "blkio:/db, /svc");
        let got: Vec<(LimitKind, u64, bool)> = limits
            .limits
            .iter()
            .map(|l| {
                (
                    l.kind,
                    l.value,
                    l.file.ends_with("db/blkio.throttle.write_iops_device"),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (LimitKind::WriteIops, 800, true),
                (LimitKind::ReadBps, 1_048_576, false),
                (LimitKind::WriteBps, 4096, false),
            ]
        );
        assert_eq!(limits.iocost, vec![Dev::new(7, 3)]);
    }

    #[test]
    fn any_control_anywhere_in_the_tree() {
        let dir =
            std::env::temp_dir().join(format!("iotop-bpf-cgroup-scan-{}", std::process::id()));
        let blkio = dir.join("blkio");
        let unified = dir.join("unified");
        fs::create_dir_all(blkio.join("a/b")).unwrap();
        fs::create_dir_all(unified.join("svc")).unwrap();
        let mounts = CgroupMounts {
            blkio: Some(blkio.clone()),
            unified: Some(unified.clone()),
        };
        let none = any_io_control(&mounts);
        // A limit of 0 (v1's way to lift one) and "max" are no control.
        fs::write(
            blkio.join("a/b/blkio.throttle.write_iops_device"),
            "7:0 0
",
        )
        .unwrap();
        fs::write(
            unified.join("svc/io.max"),
            "7:0 rbps=max wbps=max riops=max wiops=max
",
        )
        .unwrap();
        let lifted = any_io_control(&mounts);
        fs::write(
            blkio.join("a/b/blkio.throttle.write_iops_device"),
            "7:0 20
",
        )
        .unwrap();
        let v1 = any_io_control(&mounts);
        fs::write(blkio.join("a/b/blkio.throttle.write_iops_device"), "").unwrap();
        fs::write(
            unified.join("svc/io.max"),
            "7:0 rbps=max wbps=1048576 riops=max wiops=max
",
        )
        .unwrap();
        let v2 = any_io_control(&mounts);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!((none, lifted, v1, v2), (false, false, true, true));
    }
}
