//! The table of requests in flight: created -> issued -> completed.
//!
//! A 4-way set-associative array instead of a BPF hash map: a hash map insert and delete take
//! a bucket lock and a free-list pop/push, and submission and completion run on different
//! CPUs, so every I/O moved elements between per-CPU free lists (measured: ~530 ns per
//! insert here). Array lookups are inlined by the verifier: no helper call, no lock.
//!
//! Each set keeps its keys on one cache line and each value on a line of its own (see
//! [`InFlightSet`]); the map is mmapable only so that the kernel page-aligns its values,
//! which puts those lines on cache-line boundaries.
//!
//! A slot is written by the probes of one request at a time: its creation (one CPU), then
//! its issue and completion (ordered after the creation by the block layer). Two different
//! requests of one set being created at the same instant on two CPUs could race; the loser's
//! completion then counts as unpaired, which the status line shows.

use aya_ebpf::{bindings::BPF_F_MMAPABLE, macros::map, maps::Array};
use iotop_bpf_common::{
    assoc::{Way, choose, position},
    block::{IN_FLIGHT_SETS, IN_FLIGHT_WAYS, InFlight, InFlightKey, InFlightSet, in_flight_set},
    maps::COUNTER_IN_FLIGHT_EVICTED,
};

use iotop_bpf_common::rwbs::RWBS_READ_LEN;

use crate::{blame::Blame, emit::bump};

/// What a completion tracepoint says about the request.
pub struct Completion {
    pub dev: u32,
    pub sector: u64,
    /// 0 when the tracepoint does not say (then the whole request completed).
    pub done_bytes: u32,
    pub error: i32,
    pub op: u8,
    /// `FLAG_*` bits known here (the raw probes decode them from `cmd_flags`).
    pub flags: u8,
    pub rwbs: [u8; RWBS_READ_LEN],
    /// Whom it is blamed on (raw tracepoints only: the classic ones do not give the request).
    pub blame: Blame,
}

#[map]
static IN_FLIGHT: Array<InFlightSet> = Array::with_max_entries(IN_FLIGHT_SETS, BPF_F_MMAPABLE);

/// A slot of the table: its key and its value.
#[derive(Clone, Copy)]
pub struct Slot {
    key: *mut InFlightKey,
    pub value: *mut InFlight,
}

#[inline(always)]
fn slot(set: *mut InFlightSet, way: usize) -> Slot {
    // SAFETY: `way < IN_FLIGHT_WAYS` at every caller; a valid map value.
    unsafe {
        Slot {
            key: &raw mut (*set).keys[way],
            value: &raw mut (*set).lines[way].value,
        }
    }
}

/// The slot of `key`'s request in flight.
#[inline(always)]
pub fn find(key: &InFlightKey) -> Option<Slot> {
    let set = IN_FLIGHT.get_ptr_mut(in_flight_set(key))?;
    // SAFETY: a valid map value, `way < IN_FLIGHT_WAYS`; see the module comment for
    // concurrent access.
    let way = position::<IN_FLIGHT_WAYS>(|way| holds(unsafe { (*set).keys[way] }, key))?;
    let slot = slot(set, way);
    // SAFETY: as above.
    if unsafe { (*slot.value).created_ns } == 0 {
        return None; // its request completed
    }
    Some(slot)
}

#[inline(always)]
fn holds(stored: InFlightKey, key: &InFlightKey) -> bool {
    stored.dev == key.dev && stored.sector == key.sector
}

/// The slot to store `key` in: the one holding it already (the common case: the key
/// line alone is read), else a slot never used, else one whose request completed, else
/// the set's first slot (an entry whose completion was lost; counted). Fill its value in
/// place, then [`publish`] the key.
#[inline(always)]
pub fn claim(key: &InFlightKey) -> Option<Slot> {
    let set = IN_FLIGHT.get_ptr_mut(in_flight_set(key))?;
    // SAFETY (the three closures): a valid map value, `way < IN_FLIGHT_WAYS`; see the module
    // comment for concurrent access.
    let way = choose::<IN_FLIGHT_WAYS>(
        |way| holds(unsafe { (*set).keys[way] }, key),
        |way| unsafe { (*set).keys[way].dev } == 0,
        |way| unsafe { (*set).lines[way].value.created_ns } == 0,
    );
    if let Way::Evicted(_) = way {
        bump(COUNTER_IN_FLIGHT_EVICTED);
    }
    Some(slot(set, way.index::<IN_FLIGHT_WAYS>()))
}

/// Makes a claimed slot, its value filled in, findable under `key`. The key goes last, so
/// a reader never pairs a new key with an old value; a slot already holding `key` is not
/// written again (that would dirty the keys line for the set's other requests).
#[inline(always)]
pub fn publish(slot: Slot, key: &InFlightKey) {
    // SAFETY: a valid map value.
    unsafe {
        if !holds(*slot.key, key) {
            *slot.key = *key;
        }
    }
}

/// Stores a copy of `value` (with a non-zero `created_ns`) under `key` (see [`claim`]).
#[inline(always)]
pub fn insert(key: &InFlightKey, value: &InFlight) {
    if let Some(slot) = claim(key) {
        // SAFETY: a valid map value.
        unsafe { *slot.value = *value };
        publish(slot, key);
    }
}

/// Frees a slot returned by [`find`]; its key stays (see [`InFlightSet`]).
#[inline(always)]
pub fn remove(slot: Slot) {
    // SAFETY: a valid map value; `created_ns == 0` marks it free.
    unsafe { (*slot.value).created_ns = 0 };
}
