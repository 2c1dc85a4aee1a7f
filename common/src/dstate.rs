//! Tasks in uninterruptible sleep (D state): an episode runs from the thread's switch out in
//! D to the wakeup that makes it runnable again.
//!
//! Where BTF describes the scheduler, one `sched_switch` program sees both ends: the switch
//! out in D starts the episode, and the thread's next switch in ends it at the time its
//! wakeup queued it (`sched_info.last_queued`, the runqueue clock the scheduler stamps at the
//! wakeup's enqueue and clears only after the tracepoint), so no wakeup program runs.
//! [`episode_end`] decides that end. The classic tracepoints (kernels without BTF) pair
//! `sched_switch` with `sched_wakeup` instead ([`on_switch`], [`on_wakeup`], written against
//! [`EpisodeTable`] so that the host's unit tests run them over a `BTreeMap`).

use crate::abi::{COMM_LEN, RecordHeader};

/// `TASK_UNINTERRUPTIBLE`.
pub const TASK_UNINTERRUPTIBLE: u64 = 0x2;
/// `TASK_NOLOAD`: with UNINTERRUPTIBLE it is `TASK_IDLE` (idle kworkers), not a stuck task.
pub const TASK_NOLOAD: u64 = 0x400;
/// How sched_switch reports `TASK_IDLE` (`TASK_REPORT_IDLE`, the "I" state).
pub const TASK_REPORT_IDLE: u64 = 0x80;
/// `TASK_FROZEN` (6.1+; unused before): a task stopped by the freezer, not waiting on I/O.
/// The scheduler does not count it as load either (see `RawOffsets::task_load_bit`).
pub const TASK_FROZEN: u64 = 0x8000;

/// Whether a task switched out with `prev_state` is going into D state. The raw task state
/// (raw tracepoint argument) marks idle as UNINTERRUPTIBLE | NOLOAD; the classic tracepoint
/// reports it as its own bit. Both are excluded, and frozen tasks.
#[inline(always)]
#[must_use]
pub const fn is_dstate(prev_state: u64) -> bool {
    prev_state & TASK_UNINTERRUPTIBLE != 0
        && prev_state & (TASK_NOLOAD | TASK_REPORT_IDLE | TASK_FROZEN) == 0
}

/// An episode in progress, keyed by thread id in [`EpisodeTable`], and the D time its
/// thread's finished episodes add up to.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct Episode {
    /// `CLOCK_MONOTONIC` at the switch out; 0: no episode in progress.
    pub start_ns: u64,
    /// The thread's process and the slot's generation, one word (see [`owner_word`]): read
    /// with `total` by user space, which tells by the generation that both are one
    /// thread's.
    pub owner: u64,
    pub pid: u32,
    /// Kernel stack id in the `STACKS` map; [`STACK_NOT_SAMPLED`] or another negative value
    /// when there is none.
    pub stack_id: i32,
    pub comm: [u8; COMM_LEN],
    /// The thread's `struct task_struct *`: a thread whose id was reused is another task.
    /// 0 from the classic probes.
    pub task: u64,
    /// The episode's clock at the switch out (see [`DStateOffsets::clock`]), which its end is
    /// read on.
    pub start_clock: u64,
    /// The thread's D time over its finished episodes, and the slot's generation (see
    /// [`total_word`]); the classic probes leave it 0 and sum per process instead.
    pub total: u64,
}

impl Episode {
    #[must_use]
    pub const fn tgid(&self) -> u32 {
        self.owner as u32
    }
}

const _: () = assert!(core::mem::size_of::<Episode>() == 64);

/// [`Episode::owner`]: the process in the low half, the slot's generation in the high half.
/// The probes change the generation whenever the slot passes to another thread (or its
/// thread exits), and write owner and total each in one store.
#[must_use]
pub const fn owner_word(tgid: u32, generation: u32) -> u64 {
    (generation as u64) << 32 | tgid as u64
}

/// Bits of [`Episode::total`] that count nanoseconds (2^56 ns: 2.3 years in D).
pub const TOTAL_NS_BITS: u32 = 56;
const TOTAL_NS_MASK: u64 = (1 << TOTAL_NS_BITS) - 1;

/// [`Episode::total`]: `ns` under the low 8 bits of the slot's generation.
#[must_use]
pub const fn total_word(generation: u32, ns: u64) -> u64 {
    ((generation as u64 & 0xff) << TOTAL_NS_BITS) | (ns & TOTAL_NS_MASK)
}

/// The nanoseconds of a [`total_word`].
#[must_use]
pub const fn total_ns(word: u64) -> u64 {
    word & TOTAL_NS_MASK
}

/// The process and D time of a slot read as `owner` then `total` while the probes may be
/// writing it: `None` unless both are of one generation (a slot changing hands, seen half
/// old and half new in either order).
#[must_use]
pub const fn slot_total(owner: u64, total: u64) -> Option<(u32, u64)> {
    if (owner >> 32) & 0xff == total >> TOTAL_NS_BITS {
        Some((owner as u32, total_ns(total)))
    } else {
        None
    }
}

/// Slots per set of the episode table.
pub const EPISODE_WAYS: usize = 4;
/// Sets in the episode table (a power of two): 8,192 threads in D at once.
pub const EPISODE_SETS: u32 = 1 << 11;

/// One episode, alone on its cache line.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct EpisodeLine {
    /// `start_ns == 0`: no episode in progress.
    pub episode: Episode,
}

/// One set of the episode table (an array, the `DSTATE_EPISODES` map): its thread ids on one
/// cache line, then a line per episode. A hash map here cost an insert at every switch into
/// D and a delete at its wakeup, on different CPUs (elements wandering between per-CPU free
/// lists); synchronous reads pay both on every request. A thread keeps its slot after its
/// episode ends (`start_ns` zeroed), so its next one is found from the ids line alone.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct EpisodeSet {
    /// Thread ids; 0 (the idle task, never in D): never used.
    pub tids: [u32; EPISODE_WAYS],
    pub _pad: [u8; 64 - 4 * EPISODE_WAYS],
    pub lines: [EpisodeLine; EPISODE_WAYS],
}

const _: () = assert!(core::mem::size_of::<EpisodeLine>() == 64);
const _: () = assert!(core::mem::size_of::<EpisodeSet>() == 64 * (1 + EPISODE_WAYS));

/// The set of thread `tid` (Fibonacci hashing: consecutive ids spread over the table).
#[inline(always)]
#[must_use]
pub const fn episode_set(tid: u32) -> u32 {
    tid.wrapping_mul(0x9e37_79b9) >> (32 - EPISODE_SETS.trailing_zeros())
}

/// `Episode::stack_id` when the probe did not take the stack: stacks cost ~0.5 µs each and
/// synchronous I/O puts a thread in D for every request, so each CPU takes at most one per
/// [`GLOBAL_STACK_MIN_GAP_NS`].
pub const STACK_NOT_SAMPLED: i32 = -2;

/// Frames of a finished episode's stack carried in its record: deep enough to reach the
/// system call from a wait in the block layer or a journal (`io_schedule` ...
/// `__x64_sys_fsync` is 12 to 18 frames on 5.10 to 6.18).
pub const DSTATE_FRAMES: usize = 24;

/// `DStateRecord::stack_bytes` when no stack was taken at the wakeup (the program that
/// takes it is not attached): the episode's sampled `stack_id` is all there is.
pub const WAKEUP_STACK_NONE: i32 = 0;

/// One finished episode (only those above the threshold are streamed), with the thread's
/// kernel stack taken at its wakeup, where the thread still sleeps at its wait site: only
/// episodes this long pay for a stack, and every one of them gets one.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct DStateRecord {
    pub header: RecordHeader,
    pub end_ns: u64,
    pub episode: Episode,
    /// Bytes of `ips` filled (a multiple of 8), a negative errno when the kernel could not
    /// take the stack, or [`WAKEUP_STACK_NONE`].
    pub stack_bytes: i32,
    pub _pad: u32,
    /// Return addresses, innermost first.
    pub ips: [u64; DSTATE_FRAMES],
}

const _: () = assert!(core::mem::size_of::<DStateRecord>() == 88 + 8 * DSTATE_FRAMES);

/// A thread in D when user space asked, with its kernel stack: what the task iterator
/// (`dstate_stuck`) writes, one after another, for every such thread of the host.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct StuckThread {
    pub tid: u32,
    /// Bytes of `ips` filled (a multiple of 8), or a negative errno.
    pub stack_bytes: i32,
    /// Return addresses, innermost first.
    pub ips: [u64; DSTATE_FRAMES],
}

const _: () = assert!(core::mem::size_of::<StuckThread>() == 8 + 8 * DSTATE_FRAMES);

/// Offsets in the classic `sched_switch` and `sched_wakeup` tracepoints.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct SchedOffsets {
    /// `prev_state` of sched_switch (used when the raw tracepoint is not available).
    pub prev_state: u32,
    /// Its size: 8 (`long`) on current kernels, 4 on some older ones.
    pub prev_state_size: u32,
    /// `pid` and `comm` of sched_wakeup.
    pub wakeup_pid: u32,
    pub wakeup_comm: u32,
}

impl SchedOffsets {
    pub const ABSENT: Self = Self {
        prev_state: crate::tracepoint::ABSENT,
        prev_state_size: 8,
        wakeup_pid: crate::tracepoint::ABSENT,
        wakeup_comm: crate::tracepoint::ABSENT,
    };
}

pub const GLOBAL_SCHED_OFFSETS: &str = "SCHED_OFFSETS";

/// [`DStateOffsets::clock`]: `bpf_ktime_get_ns` at both ends; an episode ends when its thread
/// runs again (its wait for a CPU counts). Where BTF leads to no runqueue clock.
pub const CLOCK_KTIME: u32 = 0;
/// The runqueue clock at both ends; an episode ends when its thread runs again. Where BTF has
/// no `sched_info.last_queued` (no CONFIG_SCHED_INFO).
pub const CLOCK_RQ: u32 = 1;
/// The runqueue clock at the switch out, and the wakeup's enqueue stamp
/// (`sched_info.last_queued`, the same clock) as the end.
pub const CLOCK_RQ_QUEUED: u32 = 2;

/// Where the `sched_switch` probes find what they read of a task, from BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct DStateOffsets {
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_comm: u32,
    /// `sched_switch`'s `prev_state` argument (3, 5.18+); `ABSENT`: the state is read from
    /// the task at `task_state` (`__state`, 4 bytes, or `state`, 8 bytes, before 5.14).
    pub switch_state_arg: u32,
    pub task_state: u32,
    pub task_state_size: u32,
    /// The aligned `u32` of `task_struct` holding `sched_contributes_to_load` and its bit
    /// (`u32::MAX` where BTF does not name it). The scheduler sets it when a task blocks in D
    /// (not idle, not frozen) and leaves it until the task blocks again: a thread switching in
    /// without it is not ending a D sleep, which spares the table lookup on most switches.
    pub task_load_word: u32,
    pub task_load_bit: u32,
    /// One of `CLOCK_*`.
    pub clock: u32,
    /// `task.sched_info.last_queued` (with [`CLOCK_RQ_QUEUED`]).
    pub task_last_queued: u32,
    /// `task.se.cfs_rq`: the thread's CFS runqueue on its CPU (set for every class).
    pub task_cfs_rq: u32,
    /// `cfs_rq.rq` (CONFIG_FAIR_GROUP_SCHED); `ABSENT`: the cfs_rq is `rq.cfs`, at
    /// `rq_cfs` inside its runqueue.
    pub cfs_rq_rq: u32,
    pub rq_cfs: u32,
    /// `rq.clock`: updated at the top of `__schedule`, before the tracepoint.
    pub rq_clock: u32,
}

impl DStateOffsets {
    pub const ABSENT: Self = Self {
        task_pid: 0,
        task_tgid: 0,
        task_comm: 0,
        switch_state_arg: crate::tracepoint::ABSENT,
        task_state: crate::tracepoint::ABSENT,
        task_state_size: 0,
        task_load_word: 0,
        task_load_bit: u32::MAX,
        clock: CLOCK_KTIME,
        task_last_queued: crate::tracepoint::ABSENT,
        task_cfs_rq: crate::tracepoint::ABSENT,
        cfs_rq_rq: crate::tracepoint::ABSENT,
        rq_cfs: 0,
        rq_clock: crate::tracepoint::ABSENT,
    };
}

pub const GLOBAL_DSTATE_OFFSETS: &str = "DSTATE_OFFSETS";

/// How an episode that began at `start` (its clock at the switch out) ended, told at its
/// thread's switch in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpisodeEnd {
    /// At the wakeup's enqueue stamp.
    Queued(u64),
    /// When the thread runs again: no stamp of this episode's wakeup (none kept on this
    /// kernel, or one from before the episode began).
    Running(u64),
}

impl EpisodeEnd {
    #[must_use]
    pub const fn clock(self) -> u64 {
        match self {
            Self::Queued(c) | Self::Running(c) => c,
        }
    }
}

/// The end of an episode that began at `start`: the wakeup's enqueue stamp `queued` (0 where
/// the scheduler kept none) when it falls after the start, else `now` (read only then).
#[inline(always)]
pub fn episode_end(start: u64, queued: u64, now: impl FnOnce() -> u64) -> EpisodeEnd {
    if queued != 0 && queued >= start {
        EpisodeEnd::Queued(queued)
    } else {
        EpisodeEnd::Running(now())
    }
}
/// `u64`: finished episodes at least this long are streamed (shorter ones only add to the
/// per-process D time).
pub const GLOBAL_DSTATE_RECORD_MIN_NS: &str = "DSTATE_RECORD_MIN_NS";

/// `u64`: the least time between two stacks taken on one CPU.
pub const GLOBAL_STACK_MIN_GAP_NS: &str = "STACK_MIN_GAP_NS";

/// Where episodes in progress live.
pub trait EpisodeTable {
    fn get(&self, pid: u32) -> Option<Episode>;
    /// Stores `episode` if `pid` has none; `false` (and nothing stored) when it has one.
    fn put_new(&self, pid: u32, episode: &Episode) -> bool;
    fn put(&self, pid: u32, episode: &Episode);
    fn remove(&self, pid: u32);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchOutcome {
    /// Not going into D state: nothing recorded.
    NotD,
    Started,
    /// Started, over an episode of the same thread whose wakeup was never seen.
    ReplacedStale,
}

/// A thread switched out. Returns what happened to the table.
#[inline(always)]
pub fn on_switch<T: EpisodeTable>(table: &T, prev_state: u64, episode: &Episode) -> SwitchOutcome {
    if !is_dstate(prev_state) {
        return SwitchOutcome::NotD;
    }
    // One map operation in the common case (this runs for every synchronous read).
    if table.put_new(episode.pid, episode) {
        return SwitchOutcome::Started;
    }
    table.put(episode.pid, episode);
    SwitchOutcome::ReplacedStale
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeupOutcome {
    /// The thread was not in a D episode we saw (asleep in S, or the wakeup came first).
    NoEpisode,
    Finished {
        episode: Episode,
        end_ns: u64,
    },
    /// The episode belonged to another task with the same id (its wakeup was missed and the
    /// id reused): dropped, not reported as one huge episode.
    Stale,
}

/// A thread was woken. Its command and the clock are read (by `comm` and `clock`) only when
/// it has an episode: most wakeups are of tasks sleeping in S.
#[inline(always)]
pub fn on_wakeup<T: EpisodeTable>(
    table: &T,
    pid: u32,
    comm: impl FnOnce() -> [u8; COMM_LEN],
    clock: impl FnOnce() -> u64,
) -> WakeupOutcome {
    let Some(episode) = table.get(pid) else {
        return WakeupOutcome::NoEpisode;
    };
    table.remove(pid);
    let now_ns = clock();
    if !same_comm(&episode.comm, &comm()) || now_ns < episode.start_ns {
        return WakeupOutcome::Stale;
    }
    WakeupOutcome::Finished {
        episode,
        end_ns: now_ns,
    }
}

#[inline(always)]
fn same_comm(a: &[u8; COMM_LEN], b: &[u8; COMM_LEN]) -> bool {
    let mut i = 0;
    while i < COMM_LEN {
        if a[i] != b[i] {
            return false;
        }
        if a[i] == 0 {
            return true;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    extern crate std;
    use core::cell::RefCell;
    use std::collections::BTreeMap;

    use super::*;

    #[derive(Default)]
    struct Table(RefCell<BTreeMap<u32, Episode>>);

    impl EpisodeTable for Table {
        fn get(&self, pid: u32) -> Option<Episode> {
            self.0.borrow().get(&pid).copied()
        }
        fn put_new(&self, pid: u32, episode: &Episode) -> bool {
            let mut map = self.0.borrow_mut();
            if map.contains_key(&pid) {
                return false;
            }
            map.insert(pid, *episode);
            true
        }
        fn put(&self, pid: u32, episode: &Episode) {
            self.0.borrow_mut().insert(pid, *episode);
        }
        fn remove(&self, pid: u32) {
            self.0.borrow_mut().remove(&pid);
        }
    }

    fn comm(name: &str) -> [u8; COMM_LEN] {
        let mut out = [0u8; COMM_LEN];
        out[..name.len()].copy_from_slice(name.as_bytes());
        out
    }

    fn episode(pid: u32, name: &str, start_ns: u64) -> Episode {
        Episode {
            start_ns,
            owner: owner_word(pid, 0),
            pid,
            stack_id: 7,
            comm: comm(name),
            task: 0,
            start_clock: 0,
            total: 0,
        }
    }

    #[test]
    fn a_slot_read_while_it_changes_hands_is_not_taken() {
        let (old, new) = (owner_word(10, 7), owner_word(20, 8));
        let (old_total, new_total) = (total_word(7, 5_000), total_word(8, 0));
        assert_eq!(slot_total(old, old_total), Some((10, 5_000)));
        assert_eq!(slot_total(new, new_total), Some((20, 0)));
        assert_eq!(slot_total(new, old_total), None, "the old thread's time");
        assert_eq!(slot_total(old, new_total), None);
        // The generation wraps at 8 bits in the total, 32 in the owner.
        assert_eq!(
            slot_total(owner_word(3, 0x1ff), total_word(0x1ff, 9)),
            Some((3, 9))
        );
        assert_eq!(total_ns(total_word(0x1ff, 1 << 57 | 9)), 9, "bounded");
    }

    #[test]
    fn an_episode_ends_at_its_wakeups_stamp_else_when_it_runs() {
        assert_eq!(episode_end(100, 250, || 300), EpisodeEnd::Queued(250));
        assert_eq!(episode_end(100, 100, || 300), EpisodeEnd::Queued(100));
        assert_eq!(
            episode_end(100, 0, || 300),
            EpisodeEnd::Running(300),
            "no stamp kept (sched_info off)"
        );
        assert_eq!(
            episode_end(100, 90, || 300),
            EpisodeEnd::Running(300),
            "a stamp from before the episode is another wakeup's"
        );
        let mut read = false;
        let _ = episode_end(100, 250, || {
            read = true;
            0
        });
        assert!(!read, "the clock is read only when needed");
    }

    #[test]
    fn a_switch_into_d_and_its_wakeup_make_one_episode() {
        let table = Table::default();
        assert_eq!(
            on_switch(&table, TASK_UNINTERRUPTIBLE, &episode(10, "dd", 100)),
            SwitchOutcome::Started
        );
        let WakeupOutcome::Finished { episode, end_ns } =
            on_wakeup(&table, 10, || comm("dd"), || 350)
        else {
            panic!("expected a finished episode")
        };
        assert_eq!((episode.start_ns, end_ns, episode.stack_id), (100, 350, 7));
        assert_eq!(
            on_wakeup(&table, 10, || comm("dd"), || 400),
            WakeupOutcome::NoEpisode,
            "finished once"
        );
    }

    #[test]
    fn killable_waits_count_and_idle_or_sleeping_tasks_do_not() {
        assert!(is_dstate(TASK_UNINTERRUPTIBLE));
        assert!(
            is_dstate(TASK_UNINTERRUPTIBLE | 0x100),
            "TASK_KILLABLE = UNINTERRUPTIBLE | WAKEKILL"
        );
        assert!(
            !is_dstate(TASK_UNINTERRUPTIBLE | TASK_NOLOAD),
            "raw TASK_IDLE"
        );
        assert!(
            !is_dstate(TASK_REPORT_IDLE),
            "TASK_IDLE as sched_switch reports it"
        );
        assert!(!is_dstate(0x1), "S");
        assert!(!is_dstate(TASK_UNINTERRUPTIBLE | TASK_FROZEN), "frozen");
        assert!(!is_dstate(0), "R (preempted)");
        let table = Table::default();
        assert_eq!(
            on_switch(
                &table,
                TASK_UNINTERRUPTIBLE | TASK_NOLOAD,
                &episode(3, "kworker/0:1", 1)
            ),
            SwitchOutcome::NotD
        );
        assert_eq!(
            on_switch(&table, 0x1, &episode(4, "sleep", 1)),
            SwitchOutcome::NotD
        );
        assert!(table.0.borrow().is_empty());
    }

    #[test]
    fn a_missing_wakeup_is_replaced_by_the_next_episode() {
        let table = Table::default();
        on_switch(&table, TASK_UNINTERRUPTIBLE, &episode(10, "dd", 100));
        assert_eq!(
            on_switch(&table, TASK_UNINTERRUPTIBLE, &episode(10, "dd", 900)),
            SwitchOutcome::ReplacedStale
        );
        let WakeupOutcome::Finished { episode, .. } = on_wakeup(&table, 10, || comm("dd"), || 1000)
        else {
            panic!()
        };
        assert_eq!(
            episode.start_ns, 900,
            "the stale start is not reported as a 900 ns episode"
        );
    }

    #[test]
    fn a_reused_pid_does_not_inherit_an_old_episode() {
        let table = Table::default();
        on_switch(&table, TASK_UNINTERRUPTIBLE, &episode(10, "old-task", 100));
        // The old task's wakeup was missed; a new task got pid 10 and is woken from S.
        assert_eq!(
            on_wakeup(&table, 10, || comm("new-task"), || 5_000_000),
            WakeupOutcome::Stale
        );
        assert!(table.0.borrow().is_empty(), "the stale episode is dropped");
    }

    #[test]
    fn a_wakeup_seen_before_its_switch_is_ignored() {
        let table = Table::default();
        assert_eq!(
            on_wakeup(&table, 10, || comm("dd"), || 100),
            WakeupOutcome::NoEpisode
        );
        assert_eq!(
            on_switch(&table, TASK_UNINTERRUPTIBLE, &episode(10, "dd", 120)),
            SwitchOutcome::Started
        );
        // A wakeup timestamped before the episode's start (clock read on another CPU) is not
        // turned into a negative duration.
        assert_eq!(
            on_wakeup(&table, 10, || comm("dd"), || 110),
            WakeupOutcome::Stale
        );
    }
}
