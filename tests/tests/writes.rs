//! What processes ask to write, end to end: only writes that can reach a disk count (files
//! and block devices, not pipes or /dev/null); a writer that never reaches a disk itself
//! still has its row; writev counts every iovec; and a sync's payload is its file's, through
//! whichever fd it was written.

use std::{process::Command, thread, time::Duration};

use iotop_bpf_integration::{JsonRun, LoopFs, entries_of, num, require_root, sync_cost};
use serde_json::Value;

fn logical(intervals: &[Value], pid: u32) -> u64 {
    entries_of(intervals, pid)
        .iter()
        .map(|p| num(p, "logical_write_bytes"))
        .sum()
}

/// Runs `python3 -c script` and returns its pid once it has exited successfully.
fn python(script: &str) -> u32 {
    let mut child = Command::new("python3")
        .args(["-c", script])
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success(), "{script}");
    pid
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn only_writes_that_can_reach_a_disk_count_and_every_writer_has_a_row() {
    if !require_root("only_writes_that_can_reach_a_disk_count_and_every_writer_has_a_row") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let run = JsonRun::start(&[]);
    let file = fs.path("cached");
    // 3 MiB into the page cache, exit before write-back: no request, no sync of its own.
    let to_file = python(&format!(
        "import os\nfd = os.open('{}', os.O_WRONLY | os.O_CREAT)\nfor _ in range(48): os.write(fd, b'x' * 65536)",
        file.display()
    ));
    // 3 MiB to /dev/null and 3 MiB into a pipe: no disk behind either.
    let to_null = python(
        "import os\nfd = os.open('/dev/null', os.O_WRONLY)\nfor _ in range(48): os.write(fd, b'x' * 65536)",
    );
    let to_pipe = python(
        "import os, threading\nr, w = os.pipe()\nt = threading.Thread(target=lambda: [os.read(r, 65536) for _ in iter(int, 1)], daemon=True)\nt.start()\nfor _ in range(48): os.write(w, b'x' * 65536)",
    );
    // One writev of 40 iovecs of 100 bytes (PostgreSQL writes its WAL with up to 32).
    let gathered = python(&format!(
        "import os\nfd = os.open('{}', os.O_WRONLY | os.O_CREAT)\nos.writev(fd, [b'y' * 100] * 40)",
        fs.path("gathered").display()
    ));
    thread::sleep(Duration::from_millis(1500));
    let intervals = run.stop();
    assert_eq!(
        logical(&intervals, to_file),
        48 * 65536,
        "a writer that never reached a disk itself has a row with its bytes"
    );
    assert_eq!(logical(&intervals, to_null), 0, "/dev/null is no disk");
    assert_eq!(logical(&intervals, to_pipe), 0, "a pipe is no disk");
    assert_eq!(logical(&intervals, gathered), 4000, "every iovec counts");
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_sync_makes_durable_what_was_written_through_another_fd() {
    if !require_root("a_sync_makes_durable_what_was_written_through_another_fd") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let run = JsonRun::start(&[]);
    // dpkg's way: write a file through one fd, close it, fsync it through a new one.
    let pid = python(&format!(
        "import os\nfor i in range(50):\n    p = '{}/f%d' % i\n    fd = os.open(p, os.O_WRONLY | os.O_CREAT)\n    os.write(fd, b'z' * 3000)\n    os.close(fd)\n    fd = os.open(p, os.O_RDONLY)\n    os.fsync(fd)\n    os.close(fd)",
        fs.mountpoint.display()
    ));
    thread::sleep(Duration::from_millis(1500));
    let intervals = run.stop();
    let rows = entries_of(&intervals, pid);
    let syncs: u64 = rows.iter().map(|p| num(p, "syncs")).sum();
    let empty: u64 = rows.iter().map(|p| sync_cost(p, None, "empty")).sum();
    let payload: u64 = rows
        .iter()
        .map(|p| {
            ["small", "large", "unmeasured"]
                .iter()
                .map(|pop| sync_cost(p, Some(pop), "payload_bytes"))
                .sum::<u64>()
        })
        .sum();
    assert_eq!(syncs, 50);
    assert_eq!(empty, 0, "each fsync made its file's 3000 bytes durable");
    assert_eq!(payload, 50 * 3000);
}
