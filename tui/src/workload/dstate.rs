//! `dstate`: a parent blocked in uninterruptible sleep for a known time, by vfork: the parent
//! waits in D (`wait_for_vfork_done`) until its child exits, and the child sleeps first.

use std::time::Instant;

use anyhow::{Result, bail};

use crate::cli::DState;

pub fn run(args: &DState) -> Result<()> {
    let seconds = libc::c_uint::try_from(args.seconds).unwrap_or(libc::c_uint::MAX);
    println!(
        "pid {}: blocking in vfork for {} s",
        std::process::id(),
        args.seconds
    );
    let started = Instant::now();
    // SAFETY: the child shares our memory until it exits: it only calls the async-signal-safe
    // sleep() and _exit(), and touches nothing of ours.
    #[expect(
        deprecated,
        reason = "vfork is the point: the parent must block in D until the child exits"
    )]
    let child = unsafe { libc::vfork() };
    match child {
        0 => unsafe {
            libc::sleep(seconds);
            libc::_exit(0)
        },
        -1 => bail!("vfork failed: {}", std::io::Error::last_os_error()),
        _ => {}
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    println!(
        "pid {}: was blocked {} ms",
        std::process::id(),
        started.elapsed().as_millis().min(u128::from(u64::MAX))
    );
    Ok(())
}
