//! Requests the probes summed per (process, disk) instead of streaming them (aggregation
//! mode, see `iotop_bpf_common::aggregate`): each sample carries the kernel's cumulative
//! sums, the model takes differences and adds them to the process's and the disk's figures,
//! as if it had seen those requests one by one, less what one record says that a sum
//! cannot: exact latencies (a slot's middle stands for them: quarter octaves for the total,
//! within ~12%, octaves for queue and device time) and exact sizes (a power of two: most
//! requests are one).

use iotop_bpf_common::{
    aggregate::{SIZE_SLOTS, size_slot_low},
    hist::SLOTS,
    throttle::{CALL_SLOTS, call_slot_bounds_us},
};

use super::{Dev, FastMap, ProcDiskTotals};

impl ProcDiskTotals {
    /// `self - before`, field by field (sums only grow; saturating if the map was reset).
    fn since(&self, before: &Self) -> Self {
        let minus = |now: &[(u16, u64)], then: &[(u16, u64)]| -> Vec<(u16, u64)> {
            now.iter()
                .filter_map(|&(slot, n)| {
                    let old = then.iter().find(|(s, _)| *s == slot).map_or(0, |&(_, m)| m);
                    let d = n.saturating_sub(old);
                    (d > 0).then_some((slot, d))
                })
                .collect()
        };
        Self {
            tgid: self.tgid,
            dev: self.dev,
            comm: self.comm,
            requests: [
                self.requests[0].saturating_sub(before.requests[0]),
                self.requests[1].saturating_sub(before.requests[1]),
            ],
            bytes: [
                self.bytes[0].saturating_sub(before.bytes[0]),
                self.bytes[1].saturating_sub(before.bytes[1]),
            ],
            queue_ns: self.queue_ns.saturating_sub(before.queue_ns),
            device_ns: self.device_ns.saturating_sub(before.device_ns),
            sequential: self.sequential.saturating_sub(before.sequential),
            total: minus(&self.total, &before.total),
            queue: minus(&self.queue, &before.queue),
            device: minus(&self.device, &before.device),
            read_sizes: minus(&self.read_sizes, &before.read_sizes),
            write_sizes: minus(&self.write_sizes, &before.write_sizes),
        }
    }

    /// (latency ns, count) standing for the total times: each slot's middle.
    pub fn total_latencies(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.total
            .iter()
            .filter(|(slot, _)| usize::from(*slot) < CALL_SLOTS)
            .map(|&(slot, n)| {
                let (lo, hi) = call_slot_bounds_us(usize::from(slot));
                ((lo + hi) * 500, n)
            })
    }

    /// (ns, count) standing for the queue times, and for the device times.
    pub fn queue_latencies(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        log2_middles(&self.queue)
    }

    pub fn device_latencies(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        log2_middles(&self.device)
    }

    /// (bytes, count) standing for the sizes of reads, and of writes: each slot's power of two.
    pub fn read_request_sizes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        powers_of_two(&self.read_sizes)
    }

    pub fn write_request_sizes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        powers_of_two(&self.write_sizes)
    }
}

fn powers_of_two(slots: &[(u16, u64)]) -> impl Iterator<Item = (u64, u64)> + '_ {
    slots
        .iter()
        .filter(|(slot, _)| usize::from(*slot) < SIZE_SLOTS)
        .map(|&(slot, n)| (size_slot_low(usize::from(slot)), n))
}

/// Slot `i` of a log2 histogram is `[2^(i-1), 2^i)` us, slot 0 below 1 us: its middle.
fn log2_middles(slots: &[(u16, u64)]) -> impl Iterator<Item = (u64, u64)> + '_ {
    slots
        .iter()
        .filter(|(slot, _)| usize::from(*slot) < SLOTS)
        .map(|&(slot, n)| {
            let ns = if slot == 0 { 500 } else { 750 << slot };
            (ns, n)
        })
}

/// The previous sample's sums, to take differences from.
#[derive(Debug, Default)]
pub(super) struct SummedBook {
    prev: FastMap<(u32, Dev), ProcDiskTotals>,
}

impl SummedBook {
    /// The sums at the baseline: only what comes after counts.
    pub(super) fn baseline(&mut self, totals: &[ProcDiskTotals]) {
        self.prev = totals
            .iter()
            .map(|t| ((t.tgid, t.dev), t.clone()))
            .collect();
    }

    /// What was summed since the previous sample, per (process, disk) with any request. A key
    /// absent now was removed (its process exited after its last sample): forgotten.
    pub(super) fn deltas(&mut self, totals: &[ProcDiskTotals]) -> Vec<ProcDiskTotals> {
        let zero = ProcDiskTotals::default();
        let deltas = totals
            .iter()
            .map(|now| now.since(self.prev.get(&(now.tgid, now.dev)).unwrap_or(&zero)))
            .filter(|d| d.count() > 0)
            .collect();
        self.baseline(totals);
        deltas
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Comm;

    fn totals(reads: u64, slots: &[(u16, u64)]) -> ProcDiskTotals {
        ProcDiskTotals {
            tgid: 42,
            dev: Dev::new(7, 0),
            comm: Comm::new("fio"),
            requests: [reads, 0],
            bytes: [reads * 4096, 0],
            total: slots.to_vec(),
            read_sizes: vec![(4, reads)],
            ..ProcDiskTotals::default()
        }
    }

    #[test]
    fn differences_from_the_previous_sample_and_keys_that_left_are_forgotten() {
        let mut book = SummedBook::default();
        book.baseline(&[totals(10, &[(40, 10)])]);
        let d = book.deltas(&[totals(25, &[(40, 12), (41, 13)])]);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].requests, [15, 0]);
        assert_eq!(d[0].bytes, [15 * 4096, 0]);
        assert_eq!(d[0].total, vec![(40, 2), (41, 13)]);
        assert_eq!(d[0].read_sizes, vec![(4, 15)]);
        assert!(
            book.deltas(&[totals(25, &[(40, 12), (41, 13)])]).is_empty(),
            "nothing new"
        );
        // The key was removed (its process exited): a new one under the same pid starts at 0.
        assert!(book.deltas(&[]).is_empty());
        let d = book.deltas(&[totals(3, &[(40, 3)])]);
        assert_eq!(d[0].requests, [3, 0]);
    }

    #[test]
    fn slots_stand_for_their_middles() {
        let t = ProcDiskTotals {
            queue: vec![(0, 1), (5, 2)],
            total: vec![(16, 1)],
            write_sizes: vec![(4, 7), (12, 1)],
            ..ProcDiskTotals::default()
        };
        assert_eq!(
            t.queue_latencies().collect::<Vec<_>>(),
            vec![(500, 1), (24_000, 2)]
        );
        // Quarter-octave slot 16: 32-40 us.
        let (lo, hi) = call_slot_bounds_us(16);
        assert_eq!(t.total_latencies().next(), Some(((lo + hi) * 500, 1)));
        assert!((lo * 1000..hi * 1000).contains(&((lo + hi) * 500)));
        assert_eq!(
            t.write_request_sizes().collect::<Vec<_>>(),
            vec![(4096, 7), (1 << 20, 1)]
        );
    }
}
