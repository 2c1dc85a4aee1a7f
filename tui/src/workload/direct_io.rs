//! `direct-io`: O_DIRECT block-aligned writes then reads of one file, every request known.

use std::{
    alloc::{Layout, alloc_zeroed, dealloc},
    fs::OpenOptions,
    os::unix::fs::{FileExt as _, OpenOptionsExt as _},
};

use anyhow::{Context as _, Result, ensure};

use crate::cli::DirectIo;

/// A heap buffer aligned for O_DIRECT.
pub struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBuf {
    pub fn new(len: usize, align: usize) -> Result<Self> {
        let layout = Layout::from_size_align(len, align).context("buffer layout")?;
        ensure!(len > 0, "buffer size must be positive");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        ensure!(!ptr.is_null(), "out of memory");
        Ok(Self { ptr, layout })
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for layout.size() bytes and uniquely owned.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

pub fn run(args: &DirectIo) -> Result<()> {
    ensure!(
        args.block_size >= 512 && args.block_size.is_multiple_of(512),
        "--block-size must be a multiple of 512"
    );
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_DIRECT)
        .open(&args.file)
        .with_context(|| format!("open {} with O_DIRECT", args.file.display()))?;
    let mut buf = AlignedBuf::new(args.block_size, 4096)?;
    let bs = args.block_size as u64;
    for i in 0..args.writes {
        buf.as_mut_slice().fill((i % 251) as u8);
        file.write_all_at(buf.as_mut_slice(), i * bs)
            .with_context(|| format!("O_DIRECT write #{i} to {}", args.file.display()))?;
    }
    for i in 0..args.reads {
        let offset = i % args.writes.max(1) * bs;
        file.read_exact_at(buf.as_mut_slice(), offset)
            .with_context(|| format!("O_DIRECT read #{i} from {}", args.file.display()))?;
    }
    println!(
        "pid {}: {} O_DIRECT writes and {} reads of {} bytes on {}",
        std::process::id(),
        args.writes,
        args.reads,
        args.block_size,
        args.file.display()
    );
    Ok(())
}
