//! The D episodes in progress, read in place: the probes keep them in an mmapable array
//! ([`EpisodeSet`]s), which this maps once and scans each interval, with no system call
//! per entry.

use std::{
    os::fd::{AsFd as _, AsRawFd as _},
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering, fence},
};

use anyhow::{Result, bail};
use aya::maps::MapData;
use iotop_bpf_common::dstate::{EPISODE_SETS, EPISODE_WAYS, Episode, EpisodeSet, slot_total};

/// The `DSTATE_EPISODES` array, mapped.
pub struct EpisodeTableView {
    sets: NonNull<EpisodeSet>,
    len: usize,
    /// Keeps the map's fd open while it is mapped.
    _map: MapData,
}

// SAFETY: the mapping is plain shared memory, owned by this value alone.
unsafe impl Send for EpisodeTableView {}

impl EpisodeTableView {
    /// Maps the array. It must be the mmapable `DSTATE_EPISODES` of [`EPISODE_SETS`] sets.
    pub fn map(map: MapData) -> Result<Self> {
        let info = map.info()?;
        let len = EPISODE_SETS as usize;
        if info.max_entries() as usize != len
            || info.value_size() as usize != size_of::<EpisodeSet>()
        {
            bail!(
                "DSTATE_EPISODES is {} entries of {} bytes, not {len} of {}",
                info.max_entries(),
                info.value_size(),
                size_of::<EpisodeSet>()
            );
        }
        let bytes = len * size_of::<EpisodeSet>();
        // SAFETY: maps the map's own memory (its values, page-aligned by the kernel for an
        // mmapable array); checked for failure below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            bail!("mmap DSTATE_EPISODES: {}", std::io::Error::last_os_error());
        }
        let sets = NonNull::new(addr.cast()).expect("mmap returned a non-null address");
        Ok(Self {
            sets,
            len,
            _map: map,
        })
    }

    /// A word of slot (`set`, `way`): `start_ns`, `owner` or `total`.
    fn word(&self, set: usize, way: usize, field: fn(*mut Episode) -> *mut u64) -> &AtomicU64 {
        debug_assert!(set < self.len && way < EPISODE_WAYS);
        // SAFETY: in bounds of the mapping, 8-byte aligned, and only ever accessed as a u64
        // from here; the probes write these words with single 8-byte stores (single-copy
        // atomic on x86-64 and arm64).
        unsafe {
            AtomicU64::from_ptr(field(
                &raw mut (*self.sets.as_ptr().add(set)).lines[way].episode,
            ))
        }
    }

    fn start_ns(&self, set: usize, way: usize) -> &AtomicU64 {
        // SAFETY (the closure): a field of a valid episode.
        self.word(set, way, |e| unsafe { &raw mut (*e).start_ns })
    }

    /// Every slot's process and D time (its thread's finished episodes), by slot index;
    /// `None` for a slot seen changing hands (see `slot_total`).
    pub fn totals(&self) -> impl Iterator<Item = (usize, Option<(u32, u64)>)> + '_ {
        (0..self.len).flat_map(move |set| {
            (0..EPISODE_WAYS).map(move |way| {
                // SAFETY (the closures): fields of a valid episode.
                let owner = self.word(set, way, |e| unsafe { &raw mut (*e).owner });
                let total = self.word(set, way, |e| unsafe { &raw mut (*e).total });
                let read = slot_total(owner.load(Ordering::Acquire), total.load(Ordering::Acquire));
                (set * EPISODE_WAYS + way, read)
            })
        })
    }

    /// The episodes in progress, by thread id. One being written as it is read is skipped
    /// (the probes write `start_ns` last; it is read before and after the copy, as a
    /// seqlock's reader would). The probes order their stores with a compiler fence only:
    /// enough on x86, whose stores become visible in order; a weakly ordered CPU could show
    /// an episode with an older command or stack for one interval (its start and its time in
    /// D are each one word, never torn).
    pub fn in_progress(&self) -> Vec<(u32, Episode)> {
        let mut found = Vec::new();
        for set in 0..self.len {
            for way in 0..EPISODE_WAYS {
                let start = self.start_ns(set, way).load(Ordering::Acquire);
                if start == 0 {
                    continue;
                }
                // SAFETY: in bounds; a racy copy of plain data, validated below.
                let episode = unsafe {
                    std::ptr::read_volatile(
                        &raw const (*self.sets.as_ptr().add(set)).lines[way].episode,
                    )
                };
                fence(Ordering::Acquire);
                if self.start_ns(set, way).load(Ordering::Relaxed) == start
                    && episode.start_ns == start
                {
                    found.push((episode.pid, episode));
                }
            }
        }
        found
    }

    /// Ends the episode of `tid` that started at `start_ns` (a stale one, whose wakeup was
    /// missed), unless the probes replaced it since.
    pub(super) fn end_stale(&self, tid: u32, start_ns: u64) {
        let set = iotop_bpf_common::dstate::episode_set(tid) as usize;
        // A thread holds at most one way of its set.
        for way in 0..EPISODE_WAYS {
            // SAFETY: in bounds; a plain read of the id line.
            let id = unsafe {
                std::ptr::read_volatile(&raw const (*self.sets.as_ptr().add(set)).tids[way])
            };
            if id == tid {
                // Fails, and leaves it, if a new episode of the thread replaced this one.
                let _ = self.start_ns(set, way).compare_exchange(
                    start_ns,
                    0,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
            }
        }
    }
}

impl Drop for EpisodeTableView {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, not used after this.
        unsafe {
            libc::munmap(
                self.sets.as_ptr().cast(),
                self.len * size_of::<EpisodeSet>(),
            );
        }
    }
}
