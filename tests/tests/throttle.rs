//! The wait before the request, end to end: fio's direct I/O held by a cgroup-v1 blkio
//! throttle (before any request exists, so request latency looks healthy), the same job
//! unthrottled, and a buffered writer paused in balance_dirty_pages by low dirty limits on a
//! throttled disk.

use std::{
    path::PathBuf,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use iotop_bpf_integration::{
    BlkioThrottle, JsonRun, LoopFs, entries_of, findings_of, num, require_root,
};
use serde_json::Value;

/// Runs the classic job (`fio -rw=randwrite -bs=4k -direct=1 -numjobs=2 -ioengine=libaio`,
/// time-limited) on a file of `fs`, inside the blkio group `group` when given; returns fio's
/// JSON report.
fn fio_randwrite(fs: &LoopFs, group: Option<&str>, seconds: u32) -> Value {
    let file = fs.path("fio.dat");
    let fio = format!(
        "exec fio --name=randwrite --filename={} --size=32M --rw=randwrite --bs=4k --direct=1 \
         --numjobs=2 --ioengine=libaio --iodepth=16 --runtime={seconds} --time_based \
         --output-format=json",
        file.display()
    );
    let script = match group {
        Some(group) => format!("echo $$ > /sys/fs/cgroup/blkio/{group}/cgroup.procs && {fio}"),
        None => fio,
    };
    let out = Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("run fio (is it installed? `cargo xtask setup`)");
    assert!(
        out.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("fio's JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// fio's write completion-latency p99 over its jobs (the largest), us.
fn fio_clat_p99_us(report: &Value) -> u64 {
    report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| {
            job["write"]["clat_ns"]["percentile"]["99.000000"]
                .as_u64()
                .expect("fio's clat p99")
                / 1000
        })
        .max()
        .unwrap()
}

/// Process entries named fio that made direct I/O calls, per interval.
fn fio_entries(intervals: &[Value]) -> Vec<&Value> {
    intervals
        .iter()
        .flat_map(|i| i["processes"].as_array().unwrap().iter())
        .filter(|p| p["comm"] == "fio" && num(p, "direct_io_calls") > 0)
        .collect()
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn fio_held_by_a_blkio_throttle_is_not_shown_healthy() {
    if !require_root("fio_held_by_a_blkio_throttle_is_not_shown_healthy") {
        return;
    }
    const IOPS: u32 = 800;
    let fs = LoopFs::new("ext4", 256);
    // The limit is set before the tool starts: call latency is measured on demand, while a
    // cgroup I/O control is configured.
    let throttle = BlkioThrottle::new(&fs.dev, IOPS);
    let run = JsonRun::start(&[]);
    let report = fio_randwrite(&fs, Some(&throttle.name), 6);
    thread::sleep(Duration::from_millis(700));
    let intervals = run.stop();

    assert!(
        intervals
            .iter()
            .all(|i| i["events"]["call_latency"] == true),
        "call latency measured while a blkio limit is set"
    );
    let fio_p99 = fio_clat_p99_us(&report);
    let entries = fio_entries(&intervals);
    let full: Vec<&&Value> = entries
        .iter()
        .filter(|p| num(p, "direct_io_calls") >= 100)
        .collect();
    assert!(
        full.len() >= 4,
        "fio's job processes seen with their calls over several intervals: {entries:#?}"
    );
    let call_p99: Vec<u64> = full
        .iter()
        .map(|p| num(&p["call_latency_us"], "p99"))
        .collect();
    let request_p99: Vec<u64> = full
        .iter()
        .map(|p| num(&p["io_latency_us"], "p99"))
        .collect();
    eprintln!(
        "fio clat p99 {fio_p99} us; iotop-bpf call p99 per job and interval {call_p99:?} us, \
         request p99 {request_p99:?} us"
    );
    // The latency shown is within reach of fio's own completion latency (the kernel's
    // histogram slots are a quarter-octave wide).
    for p99 in &call_p99 {
        assert!(
            *p99 * 2 >= fio_p99 && *p99 <= fio_p99 * 3 / 2,
            "call p99 {p99} us vs fio's clat p99 {fio_p99} us"
        );
    }
    // Request latency alone would look healthy: the wait is before the request.
    let median_request = {
        let mut sorted = request_p99.clone();
        sorted.sort_unstable();
        sorted[sorted.len() / 2]
    };
    assert!(
        median_request * 4 < fio_p99,
        "the requests themselves are fast ({median_request} us): the test shows what they miss"
    );
    for p in &full {
        let share = p["prequeue_share"].as_f64().unwrap();
        assert!(
            share >= 0.5,
            "most of the call time is outside any request: {share} in {p}"
        );
        assert!(num(p, "prequeue_ms") > 0);
    }

    // A finding names the throttling, the cgroup and its limit.
    let pids: Vec<u32> = full
        .iter()
        .map(|p| u32::try_from(num(p, "pid")).unwrap())
        .collect();
    let found: Vec<&Value> = pids
        .iter()
        .flat_map(|&pid| findings_of(&intervals, "io_throttled", pid))
        .collect();
    assert!(!found.is_empty(), "io_throttled raised for fio's jobs");
    let group = format!("blkio:/{}", throttle.name);
    let limit = format!("blkio.throttle.write_iops_device {} {IOPS}", fs.dev);
    for f in &found {
        assert!(
            matches!(f["severity"].as_str(), Some("warning" | "critical")),
            "{f}"
        );
        let summary = f["summary"].as_str().unwrap();
        assert!(
            summary.contains(&group) && summary.contains(&limit),
            "the finding names {group} and {limit}: {summary}"
        );
        assert_eq!(f["evidence"]["cgroup"], group.as_str());
        assert_eq!(f["evidence"]["limit_kind"], "write_iops");
        assert_eq!(num(&f["evidence"], "limit_value"), u64::from(IOPS));
        assert_eq!(f["dev"], fs.dev.as_str());
    }
    // The process rows list the limit too.
    let limited = full.iter().any(|p| {
        p["limits_cgroup"] == group.as_str()
            && p["io_limits"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["kind"] == "write_iops" && num(l, "value") == u64::from(IOPS))
    });
    assert!(limited, "io_limits of fio's rows name the limit");
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn the_same_job_unthrottled_is_healthy() {
    if !require_root("the_same_job_unthrottled_is_healthy") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    // No I/O control is configured: measure anyway.
    let run = JsonRun::start_with_env(&[], &[("IOTOP_BPF_CALL_LATENCY", "on")]);
    let report = fio_randwrite(&fs, None, 3);
    thread::sleep(Duration::from_millis(700));
    let intervals = run.stop();
    let fio_p99 = fio_clat_p99_us(&report);
    let entries = fio_entries(&intervals);
    assert!(!entries.is_empty(), "fio's calls measured");
    for p in &entries {
        let pid = u32::try_from(num(p, "pid")).unwrap();
        assert!(
            findings_of(&intervals, "io_throttled", pid).is_empty(),
            "no io_throttled finding without a throttle (fio clat p99 {fio_p99} us): {p}"
        );
    }
    eprintln!(
        "fio clat p99 {fio_p99} us; call p99 {:?} us; prequeue share {:?}",
        entries
            .iter()
            .map(|p| num(&p["call_latency_us"], "p99"))
            .collect::<Vec<_>>(),
        entries
            .iter()
            .map(|p| p["prequeue_share"].as_f64().unwrap())
            .collect::<Vec<_>>()
    );
}

/// Sets `vm.dirty_bytes` and `vm.dirty_background_bytes`; the previous settings (bytes or
/// ratios) come back on drop, also when the test fails.
struct DirtyLimits {
    saved: Vec<(&'static str, String)>,
}

fn sysctl_path(name: &str) -> PathBuf {
    PathBuf::from("/proc/sys/vm").join(name)
}

impl DirtyLimits {
    fn set(dirty_bytes: u64, background_bytes: u64) -> Self {
        let read = |name: &str| {
            std::fs::read_to_string(sysctl_path(name))
                .unwrap()
                .trim()
                .to_string()
        };
        // Writing one of a bytes/ratio pair zeroes the other: restore the one in use.
        let mut saved = Vec::new();
        for (bytes, ratio) in [
            ("dirty_bytes", "dirty_ratio"),
            ("dirty_background_bytes", "dirty_background_ratio"),
        ] {
            let value = read(bytes);
            saved.push(if value == "0" {
                (ratio, read(ratio))
            } else {
                (bytes, value)
            });
        }
        let limits = Self { saved };
        std::fs::write(sysctl_path("dirty_bytes"), dirty_bytes.to_string()).unwrap();
        std::fs::write(
            sysctl_path("dirty_background_bytes"),
            background_bytes.to_string(),
        )
        .unwrap();
        limits
    }
}

impl Drop for DirtyLimits {
    fn drop(&mut self) {
        for (name, value) in &self.saved {
            if let Err(e) = std::fs::write(sysctl_path(name), value) {
                eprintln!("restore vm.{name} = {value}: {e}");
            }
        }
    }
}

/// A write-bandwidth limit on a device for the root blkio group (so the flusher's write-back
/// is throttled too: cgroup v1 does not charge write-back to the dirtier's group); lifted on
/// drop.
struct RootWriteBps {
    dev: String,
}

const ROOT_WRITE_BPS: &str = "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device";

impl RootWriteBps {
    fn new(dev: &str, bps: u64) -> Self {
        std::fs::write(ROOT_WRITE_BPS, format!("{dev} {bps}")).expect("set the root write limit");
        Self {
            dev: dev.to_string(),
        }
    }
}

impl Drop for RootWriteBps {
    fn drop(&mut self) {
        let _ = std::fs::write(ROOT_WRITE_BPS, format!("{} 0", self.dev));
    }
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_buffered_writer_held_in_balance_dirty_pages_shows_its_pauses_and_the_finding() {
    if !require_root(
        "a_buffered_writer_held_in_balance_dirty_pages_shows_its_pauses_and_the_finding",
    ) {
        return;
    }
    const SECONDS: u64 = 4;
    let fs = LoopFs::new("ext4", 256);
    // Dropped in reverse: the sysctls come back first, then the disk's limit goes, then the
    // filesystem (its remaining dirty pages written at full speed).
    let _slow = RootWriteBps::new(&fs.dev, 4 << 20);
    let run = JsonRun::start(&[]);
    let limits = DirtyLimits::set(8 << 20, 4 << 20);
    let file = fs.path("buffered.dat");
    let mut dd = Command::new("dd")
        .args([
            "if=/dev/zero",
            &format!("of={}", file.display()),
            "bs=64k",
            "count=100000",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run dd");
    let pid = dd.id();
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    while Instant::now() < deadline && dd.try_wait().unwrap().is_none() {
        thread::sleep(Duration::from_millis(50));
    }
    let _ = dd.kill();
    let _ = dd.wait();
    drop(limits);
    thread::sleep(Duration::from_millis(700));
    let intervals = run.stop();

    let rows = entries_of(&intervals, pid);
    let pause_ms: u64 = rows.iter().map(|p| num(p, "dirty_pause_ms")).sum();
    let pauses: u64 = rows.iter().map(|p| num(p, "dirty_pauses")).sum();
    eprintln!("dd paused {pauses} times for {pause_ms} ms in {SECONDS} s");
    assert!(
        pause_ms >= SECONDS * 1000 / 3 && pauses >= 10,
        "dd held in balance_dirty_pages: {pause_ms} ms in {pauses} pauses: {rows:#?}"
    );
    let found = findings_of(&intervals, "dirty_throttled", pid);
    assert!(!found.is_empty(), "dirty_throttled raised for dd");
    let f = found[0];
    let summary = f["summary"].as_str().unwrap();
    for text in [
        "vm.dirty_bytes = 8 MiB",
        "vm.dirty_background_bytes = 4 MiB",
    ] {
        assert!(summary.contains(text), "{text} named: {summary}");
    }
    assert!(
        summary.contains(&fs.name) && f["dev"] == fs.dev.as_str(),
        "the device slow to drain ({}) named: {f}",
        fs.name
    );
    assert_eq!(f["evidence"]["bdi"], fs.dev.as_str());
    assert!(num(&f["evidence"], "dirty_limit_bytes") > 0);
    assert!(
        f["evidence"]["dirty_limit"]
            .as_str()
            .unwrap()
            .contains("vm.dirty_bytes")
    );
    // The sysctls are back.
    let now = std::fs::read_to_string(sysctl_path("dirty_bytes")).unwrap();
    assert_ne!(
        now.trim(),
        (8u64 << 20).to_string(),
        "vm.dirty_bytes restored"
    );
}
