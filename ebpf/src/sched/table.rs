//! The episode table: a 4-way set-associative array by thread id, one episode per cache
//! line, read in place by user space; and the map a thread's D time goes to when its slot
//! changes hands.

use aya_ebpf::{
    bindings::BPF_F_MMAPABLE,
    macros::map,
    maps::{Array, LruPerCpuHashMap},
};
use iotop_bpf_common::{
    assoc::{Way, choose, position},
    dstate::{
        EPISODE_SETS, EPISODE_WAYS, Episode, EpisodeSet, EpisodeTable, episode_set, owner_word,
        total_ns, total_word,
    },
    maps::COUNTER_DSTATE_STALE,
};

use crate::{block::add_per_cpu, emit::bump};

/// Mmapable so that the kernel page-aligns it (each line of a set on a cache line) and user
/// space reads it in place.
#[map]
static DSTATE_EPISODES: Array<EpisodeSet> = Array::with_max_entries(EPISODE_SETS, BPF_F_MMAPABLE);

#[map]
pub(super) static DSTATE_TIME: LruPerCpuHashMap<u32, u64> =
    LruPerCpuHashMap::with_max_entries(16_384, 0);

/// The episode table over [`DSTATE_EPISODES`]: a 4-way set-associative array by thread id.
/// A thread's episodes are written by its own switch out and its switch in (or wakeup), which
/// the scheduler orders, and by user space only to clear a stale one (a compare-and-swap on
/// `start_ns`).
pub struct Episodes;

impl Episodes {
    /// The slot of `pid` (whether or not an episode is in it).
    #[inline(always)]
    pub(super) fn find(pid: u32) -> Option<*mut Episode> {
        let set = DSTATE_EPISODES.get_ptr_mut(episode_set(pid))?;
        // SAFETY: a valid map value, `way < EPISODE_WAYS`.
        let way = position::<EPISODE_WAYS>(|way| unsafe { (*set).tids[way] } == pid)?;
        Some(unsafe { &raw mut (*set).lines[way].episode })
    }

    /// The slot to store an episode of `pid` in: its own, else one never used, else one
    /// whose episode ended, else the set's first (its episode dropped: counted as stale);
    /// and whether it was already `pid`'s.
    #[inline(always)]
    pub(super) fn claim(pid: u32) -> Option<(*mut Episode, bool)> {
        let set = DSTATE_EPISODES.get_ptr_mut(episode_set(pid))?;
        // SAFETY (the three closures): a valid map value, `way < EPISODE_WAYS`.
        let way = choose::<EPISODE_WAYS>(
            |way| unsafe { (*set).tids[way] } == pid,
            |way| unsafe { (*set).tids[way] } == 0,
            |way| unsafe { (*set).lines[way].episode.start_ns } == 0,
        );
        let index = way.index::<EPISODE_WAYS>();
        // SAFETY: as above.
        unsafe {
            let slot = &raw mut (*set).lines[index].episode;
            if let Way::Own(_) = way {
                return Some((slot, true));
            }
            if let Way::Evicted(_) = way {
                // The first way's episode is dropped unfinished.
                bump(COUNTER_DSTATE_STALE);
            }
            // The id is written before the episode, and only the new thread's own switch in
            // (or wakeup) looks for it, after this.
            core::ptr::write_volatile(&raw mut (*slot).start_ns, 0);
            (*set).tids[index] = pid;
            Some((slot, false))
        }
    }

    /// Gives `slot` to the thread `task` of process `tgid` (0: to nobody, its thread
    /// exited): the D time of the thread it held goes to that thread's process in
    /// [`DSTATE_TIME`], and the slot starts a new generation, so that user space never adds
    /// one thread's time to another's process.
    ///
    /// # Safety
    /// `slot` is a valid map value.
    #[inline(always)]
    pub(super) unsafe fn hand_over(slot: *mut Episode, tgid: u32, task: u64) {
        // SAFETY: the caller's.
        let (owner, total) = unsafe { ((*slot).owner, total_ns((*slot).total)) };
        if total != 0 {
            add_per_cpu!(DSTATE_TIME, &(owner as u32), total);
        }
        // SAFETY: the caller's.
        unsafe {
            let generation = ((owner >> 32) as u32).wrapping_add(1);
            core::ptr::write_volatile(&raw mut (*slot).total, total_word(generation, 0));
            core::ptr::write_volatile(&raw mut (*slot).owner, owner_word(tgid, generation));
            (*slot).task = task;
        }
    }
}

/// Writes `episode` into a free slot, `start_ns` last: user space reads the slots in place
/// and takes an episode only if `start_ns` reads the same before and after its copy.
#[inline(always)]
fn write(slot: *mut Episode, episode: &Episode) {
    // SAFETY: a valid map value.
    unsafe {
        *slot = Episode {
            start_ns: 0,
            ..*episode
        };
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        core::ptr::write_volatile(&raw mut (*slot).start_ns, episode.start_ns);
    }
}

impl EpisodeTable for Episodes {
    #[inline(always)]
    fn get(&self, pid: u32) -> Option<Episode> {
        let slot = Self::find(pid)?;
        // SAFETY: copied out at once.
        let episode = unsafe { *slot };
        (episode.start_ns != 0).then_some(episode)
    }
    #[inline(always)]
    fn put_new(&self, pid: u32, episode: &Episode) -> bool {
        let Some((slot, _)) = Self::claim(pid) else {
            return false;
        };
        // SAFETY: a valid map value.
        if unsafe { (*slot).start_ns } != 0 {
            return false;
        }
        write(slot, episode);
        true
    }
    #[inline(always)]
    fn put(&self, pid: u32, episode: &Episode) {
        if let Some((slot, _)) = Self::claim(pid) {
            // SAFETY: a valid map value. Zeroed first: a reader never takes the old start
            // with the new fields (see `write`).
            unsafe { core::ptr::write_volatile(&raw mut (*slot).start_ns, 0) };
            write(slot, episode);
        }
    }
    #[inline(always)]
    fn remove(&self, pid: u32) {
        if let Some(slot) = Self::find(pid) {
            // SAFETY: a valid map value. User space clears only an episode whose thread left
            // D over a second ago, which this thread's own probes no longer race.
            unsafe { (*slot).start_ns = 0 };
        }
    }
}
