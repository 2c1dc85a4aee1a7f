//! `dio-tail`: O_DIRECT writes of `--size` bytes starting at `--offset`, appended one after
//! another. From an offset that is not a multiple of the filesystem block, every write ends
//! off a block boundary past EOF and the kernel zeroes the rest of its last block: the
//! "512-byte tail write" with the defaults (2 MiB at 3584). `--prealloc` writes the file
//! full first, so nothing extends EOF and nothing is zeroed.

use std::{
    fs::OpenOptions,
    io::Write as _,
    os::unix::fs::{FileExt as _, OpenOptionsExt as _},
};

use anyhow::{Context as _, Result, ensure};

use super::direct_io::AlignedBuf;
use crate::cli::DioTail;

pub fn run(args: &DioTail) -> Result<()> {
    ensure!(
        args.size > 0 && args.size.is_multiple_of(512),
        "--size must be a positive multiple of 512"
    );
    ensure!(
        args.offset.is_multiple_of(512),
        "--offset must be a multiple of 512 (the logical block size)"
    );
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let path = args
        .dir
        .join(format!("dio-tail-{}.dat", std::process::id()));
    let size = u64::try_from(args.size).context("--size")?;
    if args.prealloc {
        // Written (not just fallocated) blocks: unwritten extents would still be zeroed.
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        let zeros = vec![0u8; 1 << 20];
        let total = args.offset + size * args.count + 4096;
        let mut written = 0u64;
        while written < total {
            let n = usize::try_from((total - written).min(1 << 20)).unwrap_or(1 << 20);
            file.write_all(&zeros[..n])?;
            written += n as u64;
        }
        file.sync_all().context("fsync the preallocated file")?;
    }
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .with_context(|| format!("open {} with O_DIRECT", path.display()))?;
    let mut buf = AlignedBuf::new(args.size, 4096)?;
    buf.as_mut_slice().fill(0xab);
    for i in 0..args.count {
        file.write_all_at(buf.as_mut_slice(), args.offset + i * size)
            .with_context(|| format!("O_DIRECT write #{i} to {}", path.display()))?;
    }
    println!(
        "pid {}: {} O_DIRECT writes of {} bytes from offset {} into a {} file {}",
        std::process::id(),
        args.count,
        args.size,
        args.offset,
        if args.prealloc { "preallocated" } else { "new" },
        path.display()
    );
    if !args.keep {
        std::fs::remove_file(&path)?;
    }
    Ok(())
}
