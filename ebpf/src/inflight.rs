//! The table of requests in flight: created -> issued -> completed.
//!
//! A 4-way set-associative array instead of a BPF hash map: a hash map insert and delete take
//! a bucket lock and a free-list pop/push, and submission and completion run on different
//! CPUs, so every I/O moved elements between per-CPU free lists (measured: ~530 ns per
//! insert here). Array lookups are inlined by the verifier: no helper call, no lock.
//!
//! A slot is written by the probes of one request at a time: its creation (one CPU), then
//! its issue and completion (ordered after the creation by the block layer). Two different
//! requests of one set being created at the same instant on two CPUs could race; the loser's
//! completion then counts as unpaired, which the status line shows.

use aya_ebpf::{macros::map, maps::Array};
use iotop_bpf_common::{
    block::{IN_FLIGHT_SLOTS, IN_FLIGHT_WAYS, InFlight, InFlightKey, InFlightSlot, in_flight_set},
    maps::COUNTER_IN_FLIGHT_EVICTED,
};

use crate::block::bump;

#[map]
static IN_FLIGHT: Array<InFlightSlot> = Array::with_max_entries(IN_FLIGHT_SLOTS, 0);

/// The slot holding `key`.
#[inline(always)]
pub fn find(key: &InFlightKey) -> Option<*mut InFlightSlot> {
    let set = in_flight_set(key);
    for way in 0..IN_FLIGHT_WAYS {
        let slot = IN_FLIGHT.get_ptr_mut(set + way)?;
        // SAFETY: a valid map value; see the module comment for concurrent access.
        let stored = unsafe { (*slot).key };
        if stored.dev == key.dev && stored.sector == key.sector {
            return Some(slot);
        }
    }
    None
}

/// The slot to store `key` in: the one holding it already, else the first free slot of its
/// set, else the set's first slot (an entry whose completion was lost; counted). Fill its
/// value in place, then [`publish`] the key.
#[inline(always)]
pub fn claim(key: &InFlightKey) -> Option<*mut InFlightSlot> {
    // One pass over the set: the key's own slot wins over the first free one.
    let set = in_flight_set(key);
    let mut free = None;
    for way in 0..IN_FLIGHT_WAYS {
        let slot = IN_FLIGHT.get_ptr_mut(set + way)?;
        // SAFETY: a valid map value; see the module comment for concurrent access.
        let stored = unsafe { (*slot).key };
        if stored.dev == key.dev && stored.sector == key.sector {
            return Some(slot);
        }
        if stored.dev == 0 && free.is_none() {
            free = Some(slot);
        }
    }
    if free.is_none() {
        bump(COUNTER_IN_FLIGHT_EVICTED);
        return IN_FLIGHT.get_ptr_mut(set);
    }
    free
}

/// Makes a claimed slot findable under `key`. The key goes last, so a reader never pairs a
/// new key with an old value.
#[inline(always)]
pub fn publish(slot: *mut InFlightSlot, key: &InFlightKey) {
    // SAFETY: a valid map value.
    unsafe { (*slot).key = *key };
}

/// Stores a copy of `value` under `key` (see [`claim`]).
#[inline(always)]
pub fn insert(key: &InFlightKey, value: &InFlight) {
    if let Some(slot) = claim(key) {
        // SAFETY: a valid map value.
        unsafe { (*slot).value = *value };
        publish(slot, key);
    }
}

/// Frees a slot returned by [`find`].
#[inline(always)]
pub fn remove(slot: *mut InFlightSlot) {
    // SAFETY: a valid map value; `dev == 0` marks it free.
    unsafe { (*slot).key.dev = 0 };
}
