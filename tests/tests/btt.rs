//! btt's breakdown, live: on a disk with an I/O scheduler the queue time is split into G2I
//! (created -> inserted: plugged) and I2D (inserted -> issued: in the scheduler), checked
//! against a bpftrace script timing insert -> issue on the same requests; merges per disk
//! match /proc/diskstats.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::mpsc,
    thread,
    time::Duration,
};

use iotop_bpf_integration::{JsonRun, disk_rows, num, require_root, sh};

/// A bare loop device over a file in /dev/shm (no filesystem: the test writes to it).
fn bare_loop(size_mib: u64) -> iotop_bpf_loopfs::LoopDevice {
    let backing = format!("/dev/shm/iotop-bpf-test-{}-btt.img", std::process::id());
    iotop_bpf_loopfs::LoopDevice::create(backing.into(), size_mib << 20)
        .expect("a loop device over /dev/shm")
}

/// Sets a disk's I/O scheduler, and `none` again on drop: a loop device keeps its scheduler
/// when it is detached and reused by the next test or benchmark.
struct Scheduler(String);

impl Scheduler {
    fn set(name: &str, scheduler: &str) -> Self {
        std::fs::write(format!("/sys/block/{name}/queue/scheduler"), scheduler)
            .expect("set the loop device's scheduler");
        Self(name.to_string())
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = std::fs::write(format!("/sys/block/{}/queue/scheduler", self.0), "none");
    }
}

/// `(reads merged, writes merged)` from `/sys/block/NAME/stat`.
fn merges(name: &str) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
    let cols: Vec<u64> = stat
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .collect();
    (cols[1], cols[5])
}

/// bpftrace timing insert -> issue on one device (dev_t as the block tracepoints give it).
struct PeerI2d {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl PeerI2d {
    fn start(dev: &str) -> Self {
        let (major, minor) = dev.split_once(':').unwrap();
        let dev_t = (major.parse::<u64>().unwrap() << 20) | minor.parse::<u64>().unwrap();
        let script = format!(
            "tracepoint:block:block_rq_insert /args->dev == {dev_t}/ {{ @t[args->sector] = nsecs; }}
             tracepoint:block:block_rq_issue /args->dev == {dev_t} && @t[args->sector]/ {{
                 @sum = sum(nsecs - @t[args->sector]); @n = count(); delete(@t[args->sector]); }}
             END {{ clear(@t); }}"
        );
        let mut child = Command::new("bpftrace")
            .args(["-e", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run bpftrace (cargo xtask setup installs it)");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let peer = Self { child, lines };
        let attached = peer
            .lines
            .recv_timeout(Duration::from_secs(60))
            .expect("bpftrace never attached");
        assert!(attached.starts_with("Attaching"), "bpftrace: {attached}");
        peer
    }

    /// (requests timed, their summed I2D in ns).
    fn stop(self) -> (u64, u64) {
        // SAFETY: kill with a valid pid and signal.
        unsafe { libc::kill(i32::try_from(self.child.id()).unwrap(), libc::SIGINT) };
        let mut out = (0, 0);
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(10)) {
            let value = |prefix: &str| line.strip_prefix(prefix)?.trim().parse::<u64>().ok();
            if let Some(n) = value("@n:") {
                out.0 = n;
            }
            if let Some(sum) = value("@sum:") {
                out.1 = sum;
            }
        }
        out
    }
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_disk_with_a_scheduler_splits_queue_time_and_counts_merges() {
    if !require_root("a_disk_with_a_scheduler_splits_queue_time_and_counts_merges") {
        return;
    }
    let fs = bare_loop(256);
    let _scheduler = Scheduler::set(&fs.name, "mq-deadline");
    let run = JsonRun::start(&[]);
    let peer = PeerI2d::start(&fs.dev);
    let before = merges(&fs.name);
    // Random direct writes through the scheduler, then buffered writes to the device: its
    // page cache writes back page by page, and the pages merge into large requests.
    sh(
        "fio",
        &[
            "--name=random",
            "--rw=randwrite",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=32",
            "--runtime=3",
            "--time_based",
            &format!("--filename={}", fs.device),
            "--output-format=terse",
        ],
    );
    sh(
        "dd",
        &[
            "if=/dev/zero",
            &format!("of={}", fs.device),
            "bs=4k",
            "count=20000",
            "conv=fsync",
        ],
    );
    let after = merges(&fs.name);
    let (peer_n, peer_sum_ns) = peer.stop();
    thread::sleep(Duration::from_millis(700));
    let intervals = run.stop();

    let disks = disk_rows(&intervals, &fs.name);
    let requests: u64 = disks
        .iter()
        .map(|d| num(d, "reads") + num(d, "writes"))
        .sum();
    let (mut inserted, mut g2i_ns, mut i2d_ns) = (0u64, 0.0, 0.0);
    for d in &disks {
        if let Some(s) = d["scheduler"].as_object() {
            assert_eq!(s["name"], "mq-deadline");
            let n = s["requests"].as_u64().unwrap();
            inserted += n;
            #[expect(clippy::cast_precision_loss, reason = "test arithmetic")]
            let n = n as f64;
            g2i_ns += s["g2i_avg_us"].as_f64().unwrap() * 1000.0 * n;
            i2d_ns += s["i2d_avg_us"].as_f64().unwrap() * 1000.0 * n;
        }
    }
    #[expect(clippy::cast_precision_loss, reason = "test arithmetic")]
    let (tool_i2d, peer_i2d) = (
        i2d_ns / inserted.max(1) as f64,
        peer_sum_ns as f64 / peer_n.max(1) as f64,
    );
    eprintln!(
        "{}: {requests} requests, {inserted} through mq-deadline: G2I {:.1} us, I2D {:.1} us avg; bpftrace: {peer_n} timed, I2D {:.1} us avg",
        fs.name,
        g2i_ns / inserted.max(1) as f64 / 1000.0,
        tool_i2d / 1000.0,
        peer_i2d / 1000.0
    );
    assert!(requests > 10_000, "the workload ran: {requests} requests");
    // Flushes bypass the scheduler; reads and writes all go through it. The split is
    // switched on once the disk is seen busy, at the first interval's end.
    assert!(
        inserted * 100 >= requests * 80,
        "{inserted} of {requests} requests seen going through the scheduler"
    );
    assert!(
        peer_n >= inserted,
        "bpftrace timed {peer_n}, the tool {inserted}"
    );
    // The same requests timed by both; bpftrace's own probes slow the run a little.
    assert!(
        (tool_i2d - peer_i2d).abs() <= peer_i2d * 0.2 + 10_000.0,
        "I2D: the tool {tool_i2d:.0} ns, bpftrace {peer_i2d:.0} ns"
    );

    let reported = disks.iter().fold((0, 0), |(r, w), d| {
        (r + num(d, "read_merges"), w + num(d, "write_merges"))
    });
    let counted = (after.0 - before.0, after.1 - before.1);
    eprintln!("merges (read, write): reported {reported:?}, /sys/block stat {counted:?}");
    assert!(counted.1 > 100, "the sequential job merged: {counted:?}");
    // The tool's intervals cover the workload and a little more (its baseline came first).
    assert!(
        reported.1 >= counted.1 && reported.1 - counted.1 <= counted.1 / 50 + 8,
        "write merges: reported {reported:?}, counted {counted:?}"
    );
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_disk_without_a_scheduler_shows_no_split() {
    if !require_root("a_disk_without_a_scheduler_shows_no_split") {
        return;
    }
    let disk = bare_loop(64);
    let _scheduler = Scheduler::set(&disk.name, "none");
    let run = JsonRun::start(&[]);
    sh(
        "fio",
        &[
            "--name=random",
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=io_uring",
            "--iodepth=32",
            "--runtime=2",
            "--time_based",
            &format!("--filename={}", disk.device),
            "--output-format=terse",
        ],
    );
    let intervals = run.stop();
    let rows = disk_rows(&intervals, &disk.name);
    let reads: u64 = rows.iter().map(|d| num(d, "reads")).sum();
    assert!(reads > 10_000, "the workload ran: {reads} reads");
    for d in rows {
        assert!(d["scheduler"].is_null(), "{}", d["scheduler"]);
    }
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn tar_onto_xfs_over_mq_deadline_shows_the_split() {
    if !require_root("tar_onto_xfs_over_mq_deadline_shows_the_split") {
        return;
    }
    let fs = iotop_bpf_integration::LoopFs::new("xfs", 512);
    let _scheduler = Scheduler::set(&fs.name, "mq-deadline");
    let run = JsonRun::start(&[]);
    // A program we did not write: tar unpacking the system's documentation, then sync.
    let dest = fs.path("doc");
    std::fs::create_dir_all(&dest).unwrap();
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C /usr/share -cf - doc | tar -C {} -xf - && sync",
            dest.display()
        ))
        .status()
        .unwrap();
    assert!(status.success(), "tar | tar failed");
    thread::sleep(Duration::from_millis(700));
    let intervals = run.stop();
    let disks = disk_rows(&intervals, &fs.name);
    let writes: u64 = disks.iter().map(|d| num(d, "writes")).sum();
    let split: Vec<_> = disks
        .iter()
        .filter_map(|d| d["scheduler"].as_object())
        .collect();
    let inserted: u64 = split.iter().map(|s| s["requests"].as_u64().unwrap()).sum();
    eprintln!(
        "tar onto xfs on {}: {writes} writes, {inserted} timed through mq-deadline: {:?}",
        fs.name,
        split
            .iter()
            .map(|s| (s["g2i_avg_us"].clone(), s["i2d_avg_us"].clone()))
            .collect::<Vec<_>>()
    );
    assert!(writes > 100, "tar wrote: {writes}");
    assert!(
        split.iter().all(|s| s["name"] == "mq-deadline"),
        "{split:?}"
    );
    // The split starts once the disk is seen busy: its first completed request.
    assert!(
        inserted > 0 && inserted <= writes + 1000,
        "{inserted} of {writes}"
    );
}
