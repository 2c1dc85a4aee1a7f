//! D-state accounting: threads stuck now, the longest recent episodes, and time in D per
//! process per interval.
//!
//! The kernel sums finished episodes per process; an episode still in progress at a tick is
//! counted in that interval already, and subtracted again when its full duration arrives with
//! the kernel sum, so a long episode spreads over the intervals it spans.

use super::FastMap;
use super::{
    DStateEpisode, DStateNow,
    snapshot::{DStateEpisodeRow, DStateTask, SiteCounts},
};

/// Finished episodes are remembered this long for "longest recent episodes".
const RECENT_NS: u64 = 5 * 60 * 1_000_000_000;
/// Longest recent episodes listed.
const RECENT_LISTED: usize = 10;
/// Longest recent episodes kept (the shortest go first).
const RECENT_KEPT: usize = 64;
/// Threads whose episode history is kept (the longest idle go first).
const MAX_THREADS: usize = 4_096;

/// A thread's finished streamed episodes since start.
#[derive(Clone, Copy, Debug, Default)]
struct ThreadHistory {
    tgid: u32,
    episodes: u64,
    total_ns: u64,
    last_end_ns: u64,
}

#[derive(Debug, Default)]
pub(super) struct DStateBook {
    recent: Vec<DStateEpisode>,
    per_thread: FastMap<u32, ThreadHistory>,
    /// tgid -> the kernel's cumulative D time at the previous tick.
    prev_time: FastMap<u32, u64>,
    /// (tid, start) of episodes in progress -> (tgid, ns already counted in past intervals).
    counted: FastMap<(u32, u64), (u32, u64)>,
    /// The interval's finished episodes by wait site known or not.
    sites: SiteCounts,
}

impl DStateBook {
    pub(super) fn note_finished(&mut self, episode: &DStateEpisode) {
        if self.per_thread.len() >= MAX_THREADS
            && !self.per_thread.contains_key(&episode.tid)
            && let Some(oldest) = self
                .per_thread
                .iter()
                .min_by_key(|(tid, h)| (h.last_end_ns, **tid))
                .map(|(&tid, _)| tid)
        {
            self.per_thread.remove(&oldest);
        }
        self.sites.add(&episode.stack, episode.no_stack);
        let entry = self.per_thread.entry(episode.tid).or_default();
        entry.tgid = episode.tgid;
        entry.episodes += 1;
        entry.total_ns = entry.total_ns.saturating_add(episode.duration_ns());
        entry.last_end_ns = entry.last_end_ns.max(episode.end_ns);
        if self.recent.len() >= RECENT_KEPT {
            // Keep the longest: drop the shortest remembered, unless this one is shorter.
            if let Some((i, shortest)) = self
                .recent
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.duration_ns())
            {
                if shortest.duration_ns() >= episode.duration_ns() {
                    return;
                }
                self.recent.swap_remove(i);
            }
        }
        self.recent.push(episode.clone());
    }

    /// Time in D per process in the interval `(last_tick_ns, now_ns]`.
    pub(super) fn interval_time(
        &mut self,
        now_ns: u64,
        last_tick_ns: u64,
        kernel_time: &[(u32, u64)],
        in_d: &[DStateNow],
    ) -> FastMap<u32, u64> {
        let mut time: FastMap<u32, u64> = FastMap::default();
        for &(tgid, total) in kernel_time {
            let before = self.prev_time.insert(tgid, total).unwrap_or(0);
            let delta = total.saturating_sub(before);
            if delta > 0 {
                *time.entry(tgid).or_default() += delta;
            }
        }
        // Episodes that ended since the last tick: their full duration is in the kernel sum,
        // the part counted in earlier intervals comes off.
        let ongoing: Vec<(u32, u64)> = in_d
            .iter()
            .filter_map(|d| Some((d.tid, d.start_ns?)))
            .collect();
        self.counted.retain(|key, (tgid, counted)| {
            if ongoing.contains(key) {
                return true;
            }
            if let Some(t) = time.get_mut(tgid) {
                *t = t.saturating_sub(*counted);
            }
            false
        });
        for d in in_d {
            let Some(start) = d.start_ns else { continue };
            let part = now_ns.saturating_sub(start.max(last_tick_ns));
            *time.entry(d.tgid).or_default() += part;
            self.counted.entry((d.tid, start)).or_insert((d.tgid, 0)).1 += part;
        }
        // The kernel map holds every process it still counts: a process missing from it (it
        // exited, or the LRU map dropped it) starts from zero if it comes back.
        let present: std::collections::HashSet<u32> =
            kernel_time.iter().map(|&(tgid, _)| tgid).collect();
        self.prev_time.retain(|tgid, _| present.contains(tgid));
        time
    }

    /// Threads in D now, longest first, with their episode history.
    pub(super) fn tasks(&self, now_ns: u64, in_d: &[DStateNow]) -> Vec<DStateTask> {
        let mut tasks: Vec<DStateTask> = in_d
            .iter()
            .map(|d| {
                let history = self.per_thread.get(&d.tid).copied().unwrap_or_default();
                DStateTask {
                    tid: d.tid,
                    tgid: d.tgid,
                    comm: d.comm.clone(),
                    blocked_ns: d.start_ns.map(|start| now_ns.saturating_sub(start)),
                    stack: d.stack.clone(),
                    no_stack: d.no_stack,
                    episodes: history.episodes,
                    total_ns: history.total_ns,
                }
            })
            .collect();
        tasks.sort_by(|a, b| {
            let key = |t: &DStateTask| t.blocked_ns.unwrap_or(u64::MAX);
            key(b).cmp(&key(a)).then(a.tid.cmp(&b.tid))
        });
        tasks
    }

    /// The longest episodes that ended in the last few minutes.
    pub(super) fn longest_recent(&mut self, now_ns: u64) -> Vec<DStateEpisodeRow> {
        let horizon = now_ns.saturating_sub(RECENT_NS);
        self.recent.retain(|e| e.end_ns >= horizon);
        let mut rows: Vec<DStateEpisodeRow> = self
            .recent
            .iter()
            .map(|e| DStateEpisodeRow {
                tid: e.tid,
                tgid: e.tgid,
                comm: e.comm.to_string(),
                duration_ns: e.duration_ns(),
                ended_ns: e.end_ns,
                stack: e.stack.clone(),
                no_stack: e.no_stack,
            })
            .collect();
        rows.sort_by(|a, b| {
            b.duration_ns
                .cmp(&a.duration_ns)
                .then(b.ended_ns.cmp(&a.ended_ns))
        });
        rows.truncate(RECENT_LISTED);
        rows
    }

    /// The interval's counts of wait sites, started over for the next.
    pub(super) fn take_sites(&mut self) -> SiteCounts {
        std::mem::take(&mut self.sites)
    }

    /// Forgets the threads of a process that exited.
    pub(super) fn forget_process(&mut self, tgid: u32) {
        self.per_thread.retain(|_, h| h.tgid != tgid);
    }

    #[cfg(test)]
    pub(super) fn remembered(&self) -> (usize, usize) {
        (self.recent.len(), self.per_thread.len())
    }
}
