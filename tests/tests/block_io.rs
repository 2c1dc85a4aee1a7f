//! The block-I/O pipeline end to end: real probes, a loop-backed ext4, a workload whose
//! every request we know.

use std::process::Command;

use iotop_bpf_integration::{JsonRun, LoopFs, binary, num, process_on_device, require_root};

const WRITES: u64 = 300;
const READS: u64 = 200;
const BLOCK: u64 = 4096;

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn direct_io_is_attributed_exactly_to_the_workload_and_its_disk() {
    if !require_root("direct_io_is_attributed_exactly_to_the_workload_and_its_disk") {
        return;
    }
    attributed_exactly(&[]);
}

/// The classic tracepoints stay the path for kernels without `block_io_start` or BTF: the
/// same assertions hold when they are forced.
#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn the_classic_tracepoints_attribute_exactly_too() {
    if !require_root("the_classic_tracepoints_attribute_exactly_too") {
        return;
    }
    attributed_exactly(&[("IOTOP_BPF_TRACEPOINTS", "classic")]);
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn this_kernel_gets_the_raw_tracepoints() {
    if !require_root("this_kernel_gets_the_raw_tracepoints") {
        return;
    }
    let out = Command::new(binary())
        .arg("check")
        .env_remove("IOTOP_BPF_TRACEPOINTS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("probes: raw tracepoints"), "{stdout}");
    // Requests are created at block_io_start where the kernel has it (6.5+), else at
    // block_rq_insert; every probe is on a raw (or BTF-typed raw) tracepoint.
    let creation = if std::path::Path::new("/sys/kernel/btf/vmlinux").exists()
        && std::fs::read("/sys/kernel/btf/vmlinux")
            .unwrap()
            .windows(25)
            .any(|w| w == b"btf_trace_block_io_start\0")
    {
        "attached: raw_tp:block_io_start"
    } else {
        "attached: raw_tp:block_rq_insert"
    };
    assert!(stdout.contains(creation), "{creation} missing:\n{stdout}");
    // The request's issue and completion are read by direct loads (typed, `tp_btf`), not
    // with the helper: what runs under lockdown too, and costs less per request.
    for typed in ["tp_btf:block_rq_issue", "tp_btf:block_rq_complete"] {
        assert!(
            stdout.contains(&format!("attached: {typed}\n")),
            "{typed} missing:\n{stdout}"
        );
    }
    assert!(
        stdout
            .lines()
            .filter(|l| l.starts_with("attached: "))
            // Raw tracepoints, BTF-typed ones (the wait-site probe), or the task iterator
            // (stacks of threads still in D): none needs perf_event_open, so none needs
            // kernel.perf_event_paranoid lowered.
            .all(|l| l.starts_with("attached: raw_tp:")
                || l.starts_with("attached: tp_btf:")
                || l.starts_with("attached: iter:")),
        "{stdout}"
    );
}

fn attributed_exactly(env: &[(&str, &str)]) {
    let fs = LoopFs::new("ext4", 256);
    let data = fs.path("data");
    // Allocate the file's blocks first (from this process), so the workload's O_DIRECT
    // writes are pure overwrites: no allocation, no metadata reads in its context.
    std::fs::write(&data, vec![0u8; usize::try_from(WRITES * BLOCK).unwrap()]).unwrap();
    std::fs::File::open(&data).unwrap().sync_all().unwrap();

    let run = JsonRun::start_with_env(&[], env);
    let workload = Command::new(binary())
        .args(["workload", "direct-io", "--file"])
        .arg(&data)
        .args([
            "--writes",
            &WRITES.to_string(),
            "--reads",
            &READS.to_string(),
        ])
        .output()
        .expect("run the workload");
    assert!(
        workload.status.success(),
        "workload failed: {}",
        String::from_utf8_lossy(&workload.stderr)
    );
    let pid: u32 = String::from_utf8_lossy(&workload.stdout)
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.trim_end_matches(':').parse().ok())
        .expect("the workload prints its pid");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let intervals = run.stop();

    let mine = process_on_device(&intervals, pid, &fs.dev);
    assert_eq!(
        mine.writes, WRITES,
        "writes of pid {pid} on {} ({}): {mine:?}",
        fs.name, fs.dev
    );
    assert_eq!(mine.write_bytes, WRITES * BLOCK);
    assert_eq!(mine.reads, READS);
    assert_eq!(mine.read_bytes, READS * BLOCK);

    let mut seen_latency = false;
    for interval in &intervals {
        assert_eq!(
            num(&interval["events"], "dropped"),
            0,
            "dropped events: {interval}"
        );
        for disk in interval["disks"].as_array().unwrap() {
            let requests: u64 = ["reads", "writes", "flushes", "discards", "others"]
                .iter()
                .map(|f| num(disk, f))
                .sum();
            let in_histogram: u64 = disk["histogram_us"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| num(b, "count"))
                .sum();
            assert_eq!(
                in_histogram, requests,
                "histogram total vs requests: {disk}"
            );
        }
        for p in interval["processes"].as_array().unwrap() {
            if p["pid"].as_u64() == Some(u64::from(pid)) && num(p, "ios") > 0 {
                let latency = &p["io_latency_us"];
                assert!(
                    num(latency, "max") > 0 && num(&p["device_us"], "max") > 0,
                    "latency: {p}"
                );
                assert!(num(latency, "p50") <= num(latency, "p99"), "{p}");
                seen_latency = true;
            }
        }
    }
    assert!(seen_latency, "no interval showed the workload");
    let loop_disk_requests: u64 = intervals
        .iter()
        .flat_map(|i| {
            i["disks"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["dev"] == fs.dev.as_str())
                .cloned()
                .collect::<Vec<_>>()
        })
        .map(|d| num(&d, "reads") + num(&d, "writes"))
        .sum();
    assert!(
        loop_disk_requests >= WRITES + READS,
        "the disk saw at least the workload's requests"
    );
}

/// `--json -n 1` on a busy disk: the one interval has %util, measured from the baseline taken
/// when the probes were attached.
#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn one_interval_reports_the_utilisation_of_a_busy_disk() {
    if !require_root("one_interval_reports_the_utilisation_of_a_busy_disk") {
        return;
    }
    let fs = LoopFs::new("ext4", 512);
    let mut fio = std::process::Command::new("fio")
        .args([
            "--name=busy",
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=psync",
            "--size=64m",
            "--runtime=4",
            "--time_based",
        ])
        .arg(format!("--directory={}", fs.mountpoint.display()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start fio");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let out = std::process::Command::new(binary())
        .args(["--json", "-n", "1", "-d", "1"])
        .output()
        .expect("run iotop-bpf");
    // fio's job runs in a child process: let it finish, so the filesystem can be unmounted.
    let _ = fio.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), 1, "-n 1 prints one report");
    let report: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let disk = report["disks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["dev"] == fs.dev.as_str())
        .unwrap_or_else(|| panic!("no {} in {report}", fs.dev));
    let util = disk["util_pct"].as_f64().unwrap();
    assert!(
        util > 5.0,
        "util_pct {util} of a disk fio keeps busy: {disk}"
    );
    assert!(num(disk, "reads") > 100, "{disk}");
}
