//! `lab001`: Brendan Gregg's bpf-perf-workshop lab001 as it ships: `lab001.data` opened
//! without truncation, then forever: 128-byte writes each followed by fsync, and every 200th
//! (the 50th of each 200) a 2 MiB write, also fsynced, until 50 MiB were written; then back
//! to offset 0 and again. The small synced writes are the write amplification; the big ones
//! make the sync latency bimodal. `--seconds` or `--count` stop it (the original never
//! stops).

use std::{
    fs::OpenOptions,
    io::{Seek as _, SeekFrom, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::cli::Lab001;

const BUFSIZE: usize = 128;
const BIGSIZE: usize = 2 * 1024 * 1024;
const FILESIZE: usize = 50 * 1024 * 1024;

pub fn run(args: &Lab001) -> Result<()> {
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let path = args.dir.join("lab001.data");
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .mode(0o644)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    println!(
        "pid {}: lab001 on {}: 128-byte writes each followed by fsync, a 2 MiB one every 200th, over 50 MiB",
        std::process::id(),
        path.display()
    );
    let buf = vec![0u8; BUFSIZE];
    let big = vec![0u8; BIGSIZE];
    let deadline = args
        .seconds
        .map(|s| Instant::now() + Duration::from_secs(s));
    let (mut writes, mut slowest, mut sync_time) = (0u64, Duration::ZERO, Duration::ZERO);
    let done = |writes: u64| {
        args.count.is_some_and(|n| writes >= n) || deadline.is_some_and(|d| Instant::now() >= d)
    };
    'run: loop {
        let (mut i, mut j) = (0usize, 0u64);
        while i < FILESIZE {
            let record: &[u8] = if j % 200 == 50 { &big } else { &buf };
            j += 1;
            file.write_all(record)
                .with_context(|| format!("write to {}", path.display()))?;
            let started = Instant::now();
            file.sync_all()
                .with_context(|| format!("fsync {}", path.display()))?;
            let took = started.elapsed();
            slowest = slowest.max(took);
            sync_time += took;
            i += record.len();
            writes += 1;
            if done(writes) {
                break 'run;
            }
        }
        file.seek(SeekFrom::Start(0))
            .with_context(|| format!("seek {}", path.display()))?;
    }
    println!(
        "pid {}: {writes} writes, each fsynced: mean sync {} us, slowest {} us",
        std::process::id(),
        sync_time.as_micros() / u128::from(writes.max(1)),
        slowest.as_micros()
    );
    if !args.keep {
        std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
    }
    Ok(())
}
