//! The table of open syncs: which threads are inside a sync call, a synced write or an
//! io_uring sync's worker part, and that call. A 4-way set-associative array by thread id
//! (see `iotop_bpf_common::sync::SyncSet`), as the episode table is: the hash it replaced
//! paid a bucket lock and a free-list move at every sync's entry and exit.
//!
//! A thread's slot is written by its own probes, and by an io_uring completion that ends its
//! worker's part of a sync (a compare of the request first). Two threads of one set claiming
//! a never-used way at the same instant on two CPUs could race; the loser's call then ends
//! unseen, as an evicted one does.

use aya_ebpf::{macros::map, maps::Array};
use iotop_bpf_common::{
    assoc::{Way, choose, position},
    maps::COUNTER_SYNC_EVICTED,
    sync::{SYNC_SETS, SYNC_WAYS, SyncInFlight, SyncSet, sync_set},
};

use super::syncs_active_add;
use crate::emit::bump;

#[map]
static SYNC_CALLS: Array<SyncSet> = Array::with_max_entries(SYNC_SETS, 0);

/// The open call of thread `tid`, in place.
#[inline(always)]
pub fn find(tid: u32) -> Option<*mut SyncInFlight> {
    let set = SYNC_CALLS.get_ptr_mut(sync_set(tid))?;
    // SAFETY: a valid map value, `way < SYNC_WAYS`.
    let way = position::<SYNC_WAYS>(|way| unsafe { (*set).tids[way] } == tid)?;
    // SAFETY: as above.
    let call = unsafe { &raw mut (*set).lines[way].call };
    // SAFETY: as above.
    (unsafe { (*call).start_ns } != 0).then_some(call)
}

/// Opens `call` for the thread of `pid_tgid`, counted once per thread in `SYNCS_ACTIVE`: a
/// call over one never seen to return replaces it.
#[inline(always)]
pub fn begin(pid_tgid: u64, call: &SyncInFlight) {
    let tid = pid_tgid as u32;
    let Some(set) = SYNC_CALLS.get_ptr_mut(sync_set(tid)) else {
        return;
    };
    // SAFETY (the three closures): a valid map value, `way < SYNC_WAYS`.
    let way = choose::<SYNC_WAYS>(
        |way| unsafe { (*set).tids[way] } == tid,
        |way| unsafe { (*set).tids[way] } == 0,
        |way| unsafe { (*set).lines[way].call.start_ns } == 0,
    );
    let index = way.index::<SYNC_WAYS>();
    // SAFETY: as above.
    unsafe {
        let slot = &raw mut (*set).lines[index].call;
        match way {
            // Its own slot: counted already if a call is open in it.
            Way::Own(_) if (*slot).start_ns != 0 => {}
            // Another thread's open call is dropped for this one: the count stays.
            Way::Evicted(_) => bump(COUNTER_SYNC_EVICTED),
            _ => syncs_active_add(1),
        }
        if (*set).tids[index] != tid {
            (*set).tids[index] = tid;
        }
        *slot = *call;
    }
}

/// Ends the open call of thread `tid`, if any.
#[inline(always)]
pub fn forget(tid: u32) {
    if let Some(call) = find(tid) {
        // SAFETY: a valid map value; `start_ns == 0` marks it ended.
        unsafe { (*call).start_ns = 0 };
        syncs_active_add(u64::MAX);
    }
}
