//! `long_d_state`: a thread stuck in uninterruptible sleep, named with where it waits, long
//! before the kernel's hung-task warning (120 s by default) would say anything.

use super::{Evidence, Finding, FindingKind, Scene, Severity};
use crate::{DStateTask, quantity, wait_site};

/// Blocked this long in one episode: worth a warning.
pub const WARN_NS: u64 = 5_000_000_000;
/// Half of the default hung-task timeout: critical.
pub const CRITICAL_NS: u64 = 60_000_000_000;

pub fn detect(scene: &Scene) -> Vec<Finding> {
    scene
        .dstate
        .iter()
        .filter_map(|task| check(scene, task))
        .collect()
}

fn check(scene: &Scene, task: &DStateTask) -> Option<Finding> {
    // A thread already in D when iotop-bpf started has been blocked at least that long.
    let (blocked, at_least) = match task.blocked_ns {
        Some(ns) => (ns, ""),
        None => (scene.elapsed_ns, "at least "),
    };
    if blocked < WARN_NS {
        return None;
    }
    let site = wait_site(&task.stack, task.no_stack, 3);
    let mut finding = Finding::new(
        scene,
        FindingKind::LongDState,
        if blocked >= CRITICAL_NS {
            Severity::Critical
        } else {
            Severity::Warning
        },
    );
    finding.tgid = Some(task.tgid);
    finding.comm.clone_from(&task.comm);
    finding.summary = format!(
        "{} (pid {}, tid {}) blocked in D for {at_least}{}, in {site}",
        task.comm,
        task.tgid,
        task.tid,
        quantity::latency(blocked)
    );
    finding.evidence = vec![
        ("tid", Evidence::Count(u64::from(task.tid))),
        ("blocked_ms", Evidence::Count(blocked / 1_000_000)),
        ("wait_site", Evidence::Text(site)),
        ("hung_task_timeout_s", Evidence::Count(120)),
    ];
    finding.why = "a task in uninterruptible sleep cannot be killed or interrupted until what it \
                   waits for completes; the kernel reports hung tasks after \
                   kernel.hung_task_timeout_secs (120 s)"
        .to_string();
    finding.fix = fix_for(&task.stack).to_string();
    Some(finding)
}

/// What to look at, from where the task waits.
fn fix_for(stack: &[String]) -> &'static str {
    let has = |needle: &str| stack.iter().any(|f| f.contains(needle));
    if has("jbd2") || has("xlog") || has("xfs_log") {
        "it waits for a journal commit: check the disk's latency (queue vs device time) and who else syncs"
    } else if has("vfork") {
        "a parent waits in vfork until its child calls exec or exits: look at the child"
    } else if has("rwsem") || has("mutex") || has("inode_dio_wait") {
        "it waits for a lock another task holds: look at the other tasks in D and where they wait"
    } else if has("io_schedule") || has("folio_wait") || has("blk_") || has("bit_wait") {
        "it waits for its own I/O: check the disk's queue and device time, and throttling (blkio/io.max)"
    } else {
        "look at the top frames of its stack for what it waits on"
    }
}
