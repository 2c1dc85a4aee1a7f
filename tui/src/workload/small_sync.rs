//! `small-sync`: appends, each followed by a sync call (Brendan Gregg's lab001 with 128-byte
//! records). Every sync writes a whole block plus, on a journaling filesystem, a journal
//! commit. With big records, one record or `--sync none` it is the healthy counterpart.

use std::{
    fs::OpenOptions,
    io::Write as _,
    os::fd::AsRawFd as _,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};

use super::Measured;
use crate::cli::{SmallSync, SyncCallKind};

pub fn run(args: &SmallSync) -> Result<()> {
    ensure!(args.record_size > 0, "--record-size must be positive");
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let path = args
        .dir
        .join(format!("small-sync-{}.log", std::process::id()));
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    let record = vec![b'x'; args.record_size];
    let mut measured = Measured::default();
    for i in 0..args.count {
        file.write_all(&record)
            .with_context(|| format!("write #{i} to {}", path.display()))?;
        let started = Instant::now();
        sync(&file, args.sync)?;
        measured.add(started.elapsed());
        if args.interval_ms > 0 {
            std::thread::sleep(Duration::from_millis(args.interval_ms));
        }
    }
    let (p50, max) = measured.p50_max_us();
    println!(
        "pid {}: {} x ({}-byte write + {}) on {}; measured sync latency p50 {p50} us, max {max} us",
        std::process::id(),
        args.count,
        args.record_size,
        args.sync.name(),
        path.display()
    );
    if !args.keep {
        std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
    }
    Ok(())
}

fn sync(file: &std::fs::File, kind: SyncCallKind) -> Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: plain syscalls on a valid fd.
    let rc = unsafe {
        match kind {
            SyncCallKind::Fsync => libc::fsync(fd),
            SyncCallKind::Fdatasync => libc::fdatasync(fd),
            SyncCallKind::None => return Ok(()),
            SyncCallKind::SyncFileRange => libc::sync_file_range(
                fd,
                0,
                0,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            ),
        }
    };
    if rc != 0 {
        bail!(
            "{} failed: {}",
            kind.name(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
