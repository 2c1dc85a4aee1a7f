//! Kernel stacks of D episodes: from the probes' stack map when they took one, else from
//! `/proc/TID/stack` for threads stuck long enough to be worth a file read.
//!
//! The probes take at most one stack per CPU per millisecond (a stack costs ~0.5 µs and
//! synchronous I/O puts a thread in D for every request), so a short episode often has
//! none. A thread still in D after [`PROC_AFTER_NS`] is what the D pane is for: its stack is
//! read from /proc once per episode and kept until the episode ends, so its finished record
//! gets it too.

use std::collections::HashMap;

use aya::maps::{MapData, StackTraceMap};

use super::kallsyms::{self, Kallsyms};

/// An episode without a stack this old gets one from /proc.
pub const PROC_AFTER_NS: u64 = 100_000_000;

pub struct StackBook {
    map: StackTraceMap<MapData>,
    kallsyms: Symbols,
    /// tid -> (episode start, frames read from /proc), for episodes in progress.
    from_proc: HashMap<u32, (u64, Vec<String>)>,
}

impl StackBook {
    /// `kallsyms` may still be loading (see [`Kallsyms::load_in_background`]).
    pub fn new(map: StackTraceMap<MapData>, kallsyms: std::thread::JoinHandle<Kallsyms>) -> Self {
        Self {
            map,
            kallsyms: Symbols::Loading(Some(kallsyms)),
            from_proc: HashMap::new(),
        }
    }

    /// The frames of episode (`tid`, `start_ns`), with its probe stack id; `age_ns` is how
    /// long it has lasted (so far, for one in progress).
    pub fn frames(&mut self, tid: u32, start_ns: u64, stack_id: i32, age_ns: u64) -> Vec<String> {
        if let Ok(id) = u32::try_from(stack_id)
            && let Ok(trace) = self.map.get(&id, 0)
        {
            return self
                .kallsyms
                .get()
                .frames(trace.frames().iter().map(|f| f.ip));
        }
        if let Some((start, frames)) = self.from_proc.get(&tid)
            && *start == start_ns
        {
            return frames.clone();
        }
        if age_ns < PROC_AFTER_NS {
            return Vec::new();
        }
        let frames = proc_stack(tid);
        self.from_proc.insert(tid, (start_ns, frames.clone()));
        frames
    }

    /// Forgets /proc stacks of episodes no longer in progress (`live` lists those that are).
    pub fn retain(&mut self, live: impl Fn(u32, u64) -> bool) {
        self.from_proc.retain(|&tid, (start, _)| live(tid, *start));
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
