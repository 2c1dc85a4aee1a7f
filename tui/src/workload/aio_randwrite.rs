//! `aio-randwrite`: the classic libaio fio job `fio -rw=randwrite -bs=4k -size=100m -direct=1
//! -numjobs=2 -ioengine=libaio` without fio. Each job is a process (as fio forks them) with
//! its own file, laid out with fallocate (fio's default), writing every block once in random
//! order with O_DIRECT through Linux native AIO, `--iodepth` writes in flight. The AIO calls
//! are raw system calls (io_setup, io_submit, io_getevents, io_destroy): no libaio needed.

use std::{
    fs::OpenOptions,
    os::{fd::AsRawFd as _, unix::fs::OpenOptionsExt as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};

use super::direct_io::AlignedBuf;
use crate::cli::AioRandwrite;

/// `struct iocb` of `<linux/aio_abi.h>` (little-endian field order).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Iocb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: i32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}
const _: () = assert!(size_of::<Iocb>() == 64);

/// `struct io_event`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PWRITE: u16 = 1;

/// An AIO context, destroyed on drop.
struct Aio {
    ctx: libc::c_ulong,
}

fn os_error(what: &str) -> anyhow::Error {
    anyhow::anyhow!("{what}: {}", std::io::Error::last_os_error())
}

impl Aio {
    fn new(depth: u32) -> Result<Self> {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the context id to `ctx`.
        let rc = unsafe { libc::syscall(libc::SYS_io_setup, depth, &raw mut ctx) };
        if rc != 0 {
            return Err(os_error("io_setup (is fs.aio-max-nr exhausted?)"));
        }
        Ok(Self { ctx })
    }

    fn submit(&self, iocb: &mut Iocb) -> Result<()> {
        let mut list = [std::ptr::from_mut(iocb)];
        // SAFETY: one valid iocb whose buffer outlives the request (the caller waits for
        // every submitted request before freeing buffers).
        let rc = unsafe { libc::syscall(libc::SYS_io_submit, self.ctx, 1, list.as_mut_ptr()) };
        if rc != 1 {
            return Err(os_error("io_submit"));
        }
        Ok(())
    }

    /// Waits for at least one completion; fills `events`, returns how many.
    fn wait(&self, events: &mut [IoEvent]) -> Result<usize> {
        loop {
            // SAFETY: `events` has room for `events.len()` completions.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    self.ctx,
                    1,
                    events.len(),
                    events.as_mut_ptr(),
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            if rc >= 0 {
                return Ok(usize::try_from(rc).unwrap_or(0));
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return Err(os_error("io_getevents"));
            }
        }
    }
}

impl Drop for Aio {
    fn drop(&mut self) {
        // SAFETY: our own context; pending requests are cancelled or waited for by the kernel.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.ctx) };
    }
}

/// A small xorshift generator: random offsets, reproducible per job.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Every block once, in random order (fio's random map).
    fn permutation(&mut self, n: u64) -> Vec<u64> {
        let mut blocks: Vec<u64> = (0..n).collect();
        for i in (1..blocks.len()).rev() {
            let j = usize::try_from(self.next() % (i as u64 + 1)).unwrap_or(0);
            blocks.swap(i, j);
        }
        blocks
    }
}

fn job_file(dir: &Path, job: u32) -> PathBuf {
    dir.join(format!("aio-randwrite.{job}.0"))
}

/// One job: returns the writes done.
fn job(args: &AioRandwrite, index: u32) -> Result<u64> {
    let path = job_file(&args.dir, index);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .with_context(|| format!("open {} with O_DIRECT", path.display()))?;
    let size = i64::try_from(args.size).context("--size")?;
    // SAFETY: a valid fd; fallocate only allocates.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size) };
    if rc != 0 {
        return Err(os_error(&format!("fallocate {}", path.display())));
    }
    let depth = args.iodepth;
    let aio = Aio::new(depth)?;
    let bs = usize::try_from(args.bs).context("--bs")?;
    let mut buffers: Vec<AlignedBuf> = (0..depth)
        .map(|_| AlignedBuf::new(bs, 4096))
        .collect::<Result<_>>()?;
    for (i, buf) in buffers.iter_mut().enumerate() {
        buf.as_mut_slice().fill(u8::try_from(i % 251).unwrap_or(0));
    }
    let mut iocbs = vec![Iocb::default(); depth as usize];
    let mut events = vec![IoEvent::default(); depth as usize];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((u64::from(index) + 1) * 0x2545_f491_4f6c_dd1d));
    let blocks = args.size / args.bs;
    let deadline = args
        .seconds
        .map(|s| Instant::now() + Duration::from_secs(s));
    let mut order = rng.permutation(blocks).into_iter();
    let mut next_block = |rng: &mut Rng| -> Option<u64> {
        if let Some(b) = order.next() {
            return Some(b);
        }
        // Time-based: another pass in a new order until the time is up.
        if deadline.is_some_and(|d| Instant::now() < d) {
            order = rng.permutation(blocks).into_iter();
            return order.next();
        }
        None
    };
    let fd = u32::try_from(file.as_raw_fd()).context("fd")?;
    let mut submit = |slot: usize, block: u64, iocbs: &mut [Iocb]| -> Result<()> {
        iocbs[slot] = Iocb {
            aio_data: slot as u64,
            aio_lio_opcode: IOCB_CMD_PWRITE,
            aio_fildes: fd,
            aio_buf: buffers[slot].as_mut_slice().as_mut_ptr() as u64,
            aio_nbytes: args.bs,
            aio_offset: i64::try_from(block * args.bs).context("offset")?,
            ..Iocb::default()
        };
        aio.submit(&mut iocbs[slot])
    };
    let (mut in_flight, mut done) = (0u32, 0u64);
    for slot in 0..depth as usize {
        let Some(block) = next_block(&mut rng) else {
            break;
        };
        submit(slot, block, &mut iocbs)?;
        in_flight += 1;
    }
    while in_flight > 0 {
        let n = aio.wait(&mut events)?;
        for event in &events[..n] {
            in_flight -= 1;
            ensure!(
                event.res == i64::try_from(args.bs).unwrap_or(-1),
                "an AIO write to {} returned {} ({})",
                path.display(),
                event.res,
                std::io::Error::from_raw_os_error(i32::try_from(-event.res).unwrap_or(0))
            );
            done += 1;
            let slot = usize::try_from(event.data).unwrap_or(0);
            if let Some(block) = next_block(&mut rng) {
                submit(slot, block, &mut iocbs)?;
                in_flight += 1;
            }
        }
    }
    drop(aio);
    Ok(done)
}

pub fn run(args: &AioRandwrite) -> Result<()> {
    ensure!(
        args.bs >= 512 && args.bs.is_multiple_of(512),
        "--bs must be a multiple of 512"
    );
    ensure!(args.size >= args.bs, "--size must hold at least one block");
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    println!(
        "pid {}: aio-randwrite: {} jobs, each {} random {}-byte O_DIRECT writes over {} bytes, {} in flight (libaio)",
        std::process::id(),
        args.jobs,
        if args.seconds.is_some() {
            "time-based"
        } else {
            "one pass of"
        },
        args.bs,
        args.size,
        args.iodepth
    );
    use std::io::Write as _;
    std::io::stdout().flush()?;
    let started = Instant::now();
    let mut children = Vec::new();
    for index in 0..args.jobs {
        // SAFETY: this process is single-threaded here (workloads run before any runtime), so
        // the child may run ordinary code; it leaves with _exit, running no destructor twice.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => return Err(os_error("fork")),
            0 => {
                let code = match job(args, index) {
                    Ok(n) => {
                        println!("pid {}: job {index}: {n} writes", std::process::id());
                        0
                    }
                    Err(e) => {
                        eprintln!("iotop-bpf: aio-randwrite job {index}: {e:#}");
                        1
                    }
                };
                let _ = std::io::stdout().flush();
                // SAFETY: ends the child without unwinding into the parent's state.
                unsafe { libc::_exit(code) };
            }
            child => children.push(child),
        }
    }
    let mut failed = 0;
    for child in children {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(child, &raw mut status, 0) };
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            failed += 1;
        }
    }
    if !args.keep {
        for index in 0..args.jobs {
            let _ = std::fs::remove_file(job_file(&args.dir, index));
        }
    }
    if failed > 0 {
        bail!("{failed} of {} jobs failed", args.jobs);
    }
    println!(
        "pid {}: {} jobs done in {} ms",
        std::process::id(),
        args.jobs,
        started.elapsed().as_millis()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permutation_has_every_block_once() {
        let mut blocks = Rng(7).permutation(1_000);
        assert_ne!(blocks, (0..1_000).collect::<Vec<_>>(), "shuffled");
        blocks.sort_unstable();
        assert_eq!(blocks, (0..1_000).collect::<Vec<_>>());
    }

    #[test]
    fn two_jobs_write_every_block_through_aio() {
        let dir = std::env::temp_dir().join(format!("iotop-bpf-aio-{}", std::process::id()));
        let args = AioRandwrite {
            dir: dir.clone(),
            size: 1 << 20,
            bs: 4096,
            jobs: 1,
            iodepth: 8,
            seconds: None,
            keep: false,
        };
        std::fs::create_dir_all(&dir).unwrap();
        // O_DIRECT needs a filesystem that takes it (tmpfs does not, on older kernels).
        match job(&args, 0) {
            Ok(n) => assert_eq!(n, 256),
            Err(e) => {
                let text = format!("{e:#}");
                assert!(
                    text.contains("O_DIRECT") || text.contains("Invalid argument"),
                    "{text}"
                );
                eprintln!("skipped: {text}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
