//! Kernel stacks of D episodes, and why one is missing.
//!
//! A finished episode long enough to stream carries the stack the switch probe took from the
//! sleeping thread as it switched back in, before it ran (`dstate_switch_btf`): every such
//! episode has its wait site. Where that program is not attached, the probes' sampled stacks
//! remain: at most one per CPU per 10 ms at the switch into D (a stack costs ~0.5 µs and
//! synchronous I/O puts a thread in D for every request), so many episodes have none.
//!
//! A thread still in D has not switched in yet: its stack comes from the probes' task
//! iterator, run at each tick (or their sample, where the iterator does not load), else from
//! `/proc/TID/stack` (root only), taken at the first tick that sees the episode and kept
//! until it ends, so its finished record gets it too when nothing better came.

use std::collections::HashMap;

use iotop_bpf_probe::maps::Stacks;

use super::kallsyms::{self, Kallsyms};
use crate::model::{NoStack, WakeupStack};

/// /proc stacks read per tick at most: a thousand threads stuck at once (a hung NFS mount)
/// cost a thousand file reads, spread over a few ticks rather than one.
const PROC_READS_PER_TICK: usize = 256;

/// A wait site: frames, innermost first, or why there are none.
pub type Site = (Vec<String>, Option<NoStack>);

pub struct StackBook {
    map: Stacks,
    kallsyms: Symbols,
    /// tid -> (episode start, frames from the iterator or /proc), for episodes in progress.
    from_proc: HashMap<u32, (u64, Vec<String>)>,
    /// This tick's stacks of the threads in D, from the probes' task iterator: tid -> ips.
    stuck: HashMap<u32, Vec<u64>>,
    /// /proc reads left in this tick.
    proc_reads_left: usize,
}

impl StackBook {
    /// `kallsyms` may still be loading (see [`Kallsyms::load_in_background`]).
    pub fn new(map: Stacks, kallsyms: std::thread::JoinHandle<Kallsyms>) -> Self {
        Self {
            map,
            kallsyms: Symbols::Loading(Some(kallsyms)),
            from_proc: HashMap::new(),
            stuck: HashMap::new(),
            proc_reads_left: PROC_READS_PER_TICK,
        }
    }

    /// The site of finished episode (`tid`, `start_ns`): its wakeup stack, else its sampled
    /// one, else the one /proc showed while it lasted.
    pub fn finished(
        &mut self,
        tid: u32,
        start_ns: u64,
        stack_id: i32,
        wakeup: &WakeupStack,
    ) -> Site {
        if let WakeupStack::Taken(ips) = wakeup
            && !ips.is_empty()
        {
            return self.symbolize(ips.iter().copied());
        }
        if let Some(site) = self.sampled(stack_id) {
            return site;
        }
        if let Some((start, frames)) = self.from_proc.get(&tid)
            && *start == start_ns
            && !frames.is_empty()
        {
            return (frames.clone(), None);
        }
        match wakeup {
            WakeupStack::Failed(_) => (Vec::new(), Some(NoStack::Lost)),
            _ => (Vec::new(), Some(NoStack::NotSampled)),
        }
    }

    /// The site of episode (`tid`, `start_ns`), still in progress: its sampled stack, else
    /// the iterator's or /proc's (taken once per episode; /proc within the tick's budget).
    pub fn in_progress(&mut self, tid: u32, start_ns: u64, stack_id: i32) -> Site {
        if let Some(site) = self.sampled(stack_id) {
            return site;
        }
        if let Some((start, frames)) = self.from_proc.get(&tid)
            && *start == start_ns
        {
            return with_reason(frames.clone());
        }
        let frames = if let Some(ips) = self.stuck.remove(&tid) {
            let (frames, hidden) = self.symbolize(ips);
            if hidden.is_some() {
                return (frames, hidden);
            }
            frames
        } else {
            if self.proc_reads_left == 0 {
                return (Vec::new(), Some(NoStack::NotSampled));
            }
            self.proc_reads_left -= 1;
            proc_stack(tid)
        };
        self.from_proc.insert(tid, (start_ns, frames.clone()));
        with_reason(frames)
    }

    /// This tick's stacks from the task iterator (`tid`, return addresses).
    pub fn set_stuck(&mut self, threads: impl Iterator<Item = (u32, Vec<u64>)>) {
        self.stuck = threads.collect();
    }

    /// Forgets /proc stacks of episodes no longer in progress (`live` lists those that are)
    /// and starts the next tick's budget of /proc reads.
    pub fn retain(&mut self, live: impl Fn(u32, u64) -> bool) {
        self.from_proc.retain(|&tid, (start, _)| live(tid, *start));
        self.proc_reads_left = PROC_READS_PER_TICK;
    }

    /// The probes' sampled stack `stack_id`, if they took one.
    fn sampled(&mut self, stack_id: i32) -> Option<Site> {
        let id = u32::try_from(stack_id).ok()?;
        Some(match self.map.ips(id) {
            Some(ips) => self.symbolize(ips),
            // Replaced by another stack with the same hash (BPF_F_REUSE_STACKID).
            None => (Vec::new(), Some(NoStack::Lost)),
        })
    }

    fn symbolize(&mut self, ips: impl IntoIterator<Item = u64>) -> Site {
        let kallsyms = self.kallsyms.get();
        if kallsyms.is_empty() {
            return (Vec::new(), Some(NoStack::SymbolsHidden));
        }
        with_reason(kallsyms.frames(ips))
    }
}

/// Frames, or why there are none (nothing /proc would show, or nothing worth showing).
fn with_reason(frames: Vec<String>) -> Site {
    if frames.is_empty() {
        (frames, Some(NoStack::NotSampled))
    } else {
        (frames, None)
    }
}

/// The kernel's symbols, loaded by a thread until first needed.
enum Symbols {
    Loading(Option<std::thread::JoinHandle<Kallsyms>>),
    Ready(Kallsyms),
}

impl Symbols {
    fn get(&mut self) -> &Kallsyms {
        if let Self::Loading(handle) = self {
            // A thread that panicked leaves stacks unsymbolized rather than the tool dead.
            let loaded = handle
                .take()
                .and_then(|h| h.join().ok())
                .unwrap_or_else(|| Kallsyms::parse(""));
            *self = Self::Ready(loaded);
        }
        match self {
            Self::Ready(kallsyms) => kallsyms,
            Self::Loading(_) => unreachable!("loaded just above"),
        }
    }
}

/// A thread's kernel stack from /proc (root only), else its wait channel, else nothing.
pub fn proc_stack(tid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{tid}/stack"))
        .map(|text| kallsyms::parse_proc_stack(&text))
        .ok()
        .filter(|frames| !frames.is_empty())
        .or_else(|| {
            let wchan = std::fs::read_to_string(format!("/proc/{tid}/wchan")).ok()?;
            (!wchan.is_empty() && wchan != "0").then(|| vec![wchan])
        })
        .unwrap_or_default()
}
