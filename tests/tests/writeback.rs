//! Write-back charged to the process that dirtied the pages: a buffered `dd` whose data the
//! kernel's flusher writes later, after dd has exited.

use std::{process::Command, thread, time::Duration};

use iotop_bpf_integration::{JsonRun, LoopFs, num, require_root};

const MIB: u64 = 1 << 20;
const DD_MIB: u64 = 192;

/// Sets a sysctl for the test's duration.
struct Sysctl {
    path: &'static str,
    old: String,
}

impl Sysctl {
    fn set(path: &'static str, value: &str) -> Self {
        let old = std::fs::read_to_string(path).unwrap().trim().to_string();
        std::fs::write(path, value).unwrap();
        Self { path, old }
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, &self.old);
    }
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_buffered_dd_flushed_by_the_kernel_is_charged_to_dd() {
    if !require_root("a_buffered_dd_flushed_by_the_kernel_is_charged_to_dd") {
        return;
    }
    for fs_type in ["ext4", "xfs"] {
        charged_to_dd(fs_type);
    }
}

fn charged_to_dd(fs_type: &str) {
    let fs = LoopFs::new(fs_type, 1024);
    // Let the kernel's flusher write dirty data after a second rather than 30: no sync
    // from anyone, the periodic write-back does it.
    let _expire = Sysctl::set("/proc/sys/vm/dirty_expire_centisecs", "100");
    let _wake = Sysctl::set("/proc/sys/vm/dirty_writeback_centisecs", "100");
    let run = JsonRun::start(&[]);
    let out = fs.path("big");
    let mut dd = Command::new("dd")
        .args([
            "if=/dev/zero",
            &format!("of={}", out.display()),
            "bs=1M",
            &format!("count={DD_MIB}"),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let dd_pid = u64::from(dd.id());
    assert!(dd.wait().unwrap().success());
    // dd has exited; its pages are still dirty. Wait for the flusher to write them.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let dirty_kib = || -> u64 {
        std::fs::read_to_string("/proc/meminfo")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Dirty:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    };
    thread::sleep(Duration::from_secs(2));
    while dirty_kib() > 16 * 1024 && std::time::Instant::now() < deadline {
        thread::sleep(Duration::from_millis(200));
    }
    thread::sleep(Duration::from_millis(1500));
    let intervals = run.stop();

    let (mut charged, mut named_by_flusher, mut flusher_bytes) = (0, false, 0);
    for interval in &intervals {
        for p in interval["processes"].as_array().unwrap() {
            if p["pid"].as_u64() == Some(dd_pid) {
                charged += num(p, "writeback_bytes");
            }
            for w in p["written_for"].as_array().unwrap() {
                if w["pid"].as_u64() == Some(dd_pid) && w["why"] == "write-back" {
                    named_by_flusher = true;
                    flusher_bytes += num(w, "bytes");
                    assert!(
                        p["comm"].as_str().unwrap().starts_with("kworker"),
                        "a flusher wrote it: {p}"
                    );
                }
            }
        }
    }
    eprintln!(
        "{fs_type}: dd (pid {dd_pid}) wrote {DD_MIB} MiB buffered; {} MiB written back charged to it, {} MiB in the flushers' rows",
        charged / MIB,
        flusher_bytes / MIB
    );
    assert!(
        charged >= DD_MIB * MIB * 8 / 10,
        "{fs_type}: only {} of {DD_MIB} MiB charged to dd",
        charged / MIB
    );
    assert!(named_by_flusher, "{fs_type}: no flusher row names dd");
    assert_eq!(charged, flusher_bytes, "both sides of the charge agree");
}
