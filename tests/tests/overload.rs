//! Overload: a producer far beyond what the reader takes (the reader is stopped for a
//! second, as a starved process would be). Records are lost and counted, never silently;
//! the disk figures, kept in the kernel, stay exact.

use std::{process::Command, thread, time::Duration};

use iotop_bpf_integration::{JsonRun, num, require_root, sh};

/// Reads completed on a block device since it appeared (the kernel's own count).
fn disk_reads(name: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
    stat.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_full_ring_drops_counted_records_and_the_disk_figures_stay_exact() {
    if !require_root("a_full_ring_drops_counted_records_and_the_disk_figures_stay_exact") {
        return;
    }
    let backing = format!("/dev/shm/iotop-bpf-overload-{}.img", std::process::id());
    sh("truncate", &["-s", "256M", &backing]);
    let device = sh("losetup", &["-f", "--show", &backing])
        .trim()
        .to_string();
    let name = device.trim_start_matches("/dev/").to_string();
    let cleanup = Cleanup {
        device: device.clone(),
        backing,
    };

    // udev probes a new device (blkid reads it): let that finish, so every read counted
    // from here on is fio's.
    let _ = Command::new("udevadm").arg("settle").status();
    let run = JsonRun::start(&[]);
    let before = disk_reads(&name);
    // The 4 MiB ring holds ~44k records: at ~100k+ reads/s a stopped reader overflows it
    // within half a second.
    let tool = run.pid();
    let stall = thread::spawn(move || {
        thread::sleep(Duration::from_millis(500));
        // SAFETY: signals to the tool's own pid.
        unsafe { libc::kill(tool, libc::SIGSTOP) };
        thread::sleep(Duration::from_millis(1500));
        unsafe { libc::kill(tool, libc::SIGCONT) };
    });
    let fio = Command::new("fio")
        .args([
            "--name=overload",
            &format!("--filename={device}"),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=io_uring",
            "--iodepth=32",
            "--runtime=3",
            "--time_based",
        ])
        .output()
        .expect("run fio");
    stall.join().unwrap();
    assert!(fio.status.success(), "fio failed: {fio:?}");
    let reads = disk_reads(&name) - before;
    // Quiet intervals, so every record submitted has been read before the end.
    thread::sleep(Duration::from_millis(1500));
    let intervals = run.stop();
    drop(cleanup);

    let sum = |field: &str| -> u64 { intervals.iter().map(|i| num(&i["events"], field)).sum() };
    let (received, dropped, produced) = (sum("received"), sum("dropped"), sum("produced"));
    eprintln!(
        "{reads} reads on {name}: {produced} records produced, {received} received, {dropped} dropped, unpaired {}",
        intervals
            .last()
            .map_or(0, |i| num(&i["events"], "unpaired_total"))
    );
    assert!(
        dropped > 10_000,
        "the ring should have overflowed while the reader was stopped: {dropped} dropped of {reads} reads"
    );
    assert_eq!(
        received + dropped,
        produced,
        "every record produced is either received or counted as dropped"
    );
    // The disk's figures come from the in-kernel aggregates: exact whatever was dropped.
    let reported: u64 = intervals
        .iter()
        .flat_map(|i| i["disks"].as_array().unwrap().iter())
        .filter(|d| d["name"] == name.as_str())
        .map(|d| num(d, "reads"))
        .sum();
    // Exact but for one thing outside the tool: on this kernel (6.18) a loop device
    // completes a few requests per million without firing block_rq_complete (a bpftrace
    // script counting that tracepoint misses the very same ones), while diskstats counts
    // them. Measured: 0 to 34 in ~1.1 million.
    assert!(
        reported <= reads && reads - reported <= 64,
        "reads reported for {name}: {reported}, /sys/block/{name}/stat: {reads}"
    );
    let status = intervals
        .iter()
        .map(|i| num(&i["events"], "dropped"))
        .max()
        .unwrap();
    assert!(status > 0, "some interval reports its drops");
}

/// Detaches the loop device and removes its backing file, even when an assertion fails.
struct Cleanup {
    device: String,
    backing: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
        let _ = std::fs::remove_file(&self.backing);
    }
}
