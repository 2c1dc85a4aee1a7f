//! Judging the commit, not the call.
//!
//! Embedded databases make a transaction durable in two steps: the data pages first, then a
//! commit record that points at them (LMDB: the data pages' `fdatasync`, then its meta page,
//! ~100 bytes written through an `O_DSYNC` fd; bbolt: the pages' `fdatasync`, then its 4 KiB
//! meta page's; LMDB with a writable map: an `msync` of the map, then one of the meta page).
//! Judged on its own, the record is a sub-block sync at 40x; judged with the data it commits,
//! the transaction writes ~1.1x what it asked for. A false CRIT sends people the wrong way in
//! an incident, so the record is judged as part of its commit.
//!
//! A **companion** joins the commit of the call its thread made just before when:
//! - that commit's first call (its head) made at least one filesystem block durable (a commit
//!   record follows data; a small sync after a small sync is a logger's next record);
//! - it began within [`COMMIT_GAP_NS`] of the commit's last call's end (the database writes
//!   its record as soon as the data is durable);
//! - it made at most one block durable, and the companions together (two at most) no more
//!   than the head: a record, a header, a directory entry, or nothing new (an fsync of the
//!   same file again); a logger's next records after a large one each stay their own;
//! - it synced a file the commit synced (the meta page is in the data file), or a directory
//!   (the name of a new file).
//!
//! A companion counts with its head: its payload and device bytes go to the head's (large)
//! population, and the population counts commits, not calls, so the commit's amplification
//! is the commit's device bytes over its payload.
//! Per-record commits stay what they are (a storm of small commits, each a block or two), and
//! a record synced alone, after nothing large, stays small.

use std::collections::VecDeque;

use crate::{Dev, ledger::SettledSync};

/// The longest pause between a commit's calls: a database writes its commit record right
/// after its data is durable (microseconds apart), a preempted thread on a busy host a few
/// milliseconds later.
pub const COMMIT_GAP_NS: u64 = 5_000_000;
/// Threads whose latest commit is remembered per process (the oldest go).
const MAX_THREADS: usize = 64;
/// Files remembered per commit.
const MAX_FILES: usize = 4;
/// Companions a commit takes at most: its record and a directory's entry. A logger's next
/// records after a large one are not its commit's (each has a payload of its own).
const MAX_COMPANIONS: u32 = 2;

/// Whether a settled call begins a commit or completes the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Head,
    Companion,
}

/// A thread's latest commit.
#[derive(Clone, Debug)]
struct Tail {
    tid: u32,
    /// When its latest call ended.
    end_ns: u64,
    files: Vec<(Dev, u64)>,
    head_payload: u64,
    companions_payload: u64,
    companions: u32,
}

/// The latest commit of each of a process's threads, fed its settled calls in the order they
/// settle (a thread's in the order they ended).
#[derive(Clone, Debug, Default)]
pub(crate) struct Commits {
    tails: VecDeque<Tail>,
}

impl Commits {
    /// The role of a settled judged call that made `payload` durable; `None` for a payload
    /// that is not measured (nothing joins it, and it joins nothing).
    pub(crate) fn role(&mut self, sync: &SettledSync, payload: Option<u64>) -> Role {
        let call = &sync.call;
        let file = call
            .fs_dev
            .filter(|_| call.ino != 0)
            .map(|dev| (dev, call.ino));
        let block = u64::from(call.fs_block_size);
        let at = self.tails.iter().position(|t| t.tid == call.tid);
        if let (Some(at), Some(payload)) = (at, payload)
            && block != 0
        {
            let tail = &mut self.tails[at];
            let joins = tail.head_payload >= block
                && call.start_ns >= tail.end_ns
                && call.start_ns - tail.end_ns <= COMMIT_GAP_NS
                && payload <= block
                && tail.companions < MAX_COMPANIONS
                && tail.companions_payload + payload <= tail.head_payload
                && (call.dir || file.is_some_and(|f| tail.files.contains(&f)));
            if joins {
                tail.end_ns = call.end_ns;
                tail.companions_payload += payload;
                tail.companions += 1;
                return Role::Companion;
            }
        }
        // A large call right after a large commit of the thread's, before any record of it,
        // extends it: its files are the commit's too (data in two files, then the record in
        // the first). After a record, it is the next transaction's.
        let mut tail = Tail {
            tid: call.tid,
            end_ns: call.end_ns,
            files: file.into_iter().collect(),
            head_payload: payload.unwrap_or(0),
            companions_payload: 0,
            companions: 0,
        };
        if let Some(at) = at
            && let Some(payload) = payload
        {
            let before = &self.tails[at];
            if block != 0
                && payload >= block
                && before.head_payload >= block
                && before.companions == 0
                && call.start_ns >= before.end_ns
                && call.start_ns - before.end_ns <= COMMIT_GAP_NS
            {
                tail.head_payload += before.head_payload;
                for f in &before.files {
                    if tail.files.len() < MAX_FILES && !tail.files.contains(f) {
                        tail.files.push(*f);
                    }
                }
            }
        }
        match at {
            Some(at) => self.tails[at] = tail,
            None => {
                if self.tails.len() >= MAX_THREADS {
                    self.tails.pop_front();
                }
                self.tails.push_back(tail);
            }
        }
        Role::Head
    }
}
