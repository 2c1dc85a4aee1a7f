//! `healthy`: I/O that should raise no finding: aligned 4 KiB O_DIRECT writes into a
//! preallocated file, big sequential buffered writes with one fsync at the end, and a
//! database-like mix of 8 KiB O_DIRECT random reads and writes with an fdatasync every 64
//! writes.

use std::{
    fs::OpenOptions,
    io::Write as _,
    os::unix::fs::{FileExt as _, OpenOptionsExt as _},
};

use anyhow::{Context as _, Result};

use super::direct_io::AlignedBuf;
use crate::cli::Healthy;

const DATA_BYTES: u64 = 16 << 20;

pub fn run(args: &Healthy) -> Result<()> {
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let pid = std::process::id();
    let data = args.dir.join(format!("healthy-{pid}.db"));
    let log = args.dir.join(format!("healthy-{pid}.log"));

    // Preallocate the data file with written blocks.
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&data)?;
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..DATA_BYTES >> 20 {
        file.write_all(&chunk)?;
    }
    file.sync_all()?;
    drop(file);

    let direct = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&data)?;
    let mut page = AlignedBuf::new(4096, 4096)?;
    for i in 0..args.scale * 512 {
        direct.write_all_at(page.as_mut_slice(), (i * 4096) % DATA_BYTES)?;
    }

    let mut sequential = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&log)?;
    for _ in 0..args.scale * 16 {
        sequential.write_all(&chunk)?;
    }
    sequential.sync_all()?;

    let mut db_page = AlignedBuf::new(8192, 4096)?;
    let pages = DATA_BYTES / 8192;
    let mut writes = 0;
    for i in 0..args.scale * 500 {
        let offset = (i * 7919 % pages) * 8192;
        if i % 3 == 0 {
            direct.write_all_at(db_page.as_mut_slice(), offset)?;
            writes += 1;
            if writes % 64 == 0 {
                direct.sync_data()?;
            }
        } else {
            direct.read_exact_at(db_page.as_mut_slice(), offset)?;
        }
    }
    println!("pid {pid}: healthy I/O done in {}", args.dir.display());
    std::fs::remove_file(&data)?;
    std::fs::remove_file(&log)?;
    Ok(())
}
