//! Each process's time in D, cumulative, as the model takes it. The probes add a finished
//! episode to its thread's slot of the episode table (no map update per episode); a slot's
//! time goes to its process in the per-CPU `DSTATE_TIME` map when the slot passes to another
//! thread or its thread exits. A process's time is therefore what that map holds for it plus
//! what its threads' slots hold now.

use std::collections::HashMap;

/// Processes remembered beyond this are kept only while something of theirs is read.
const REMEMBERED: usize = 32_768;

#[derive(Default)]
pub struct DTime {
    /// Each slot's last consistent read (process, ns), for a slot seen changing hands.
    slots: Vec<Option<(u32, u64)>>,
    /// Each process's last total: totals never go back, and a process once reported stays
    /// reported until it is forgotten (the model starts a missing one from zero).
    last: HashMap<u32, u64>,
}

impl DTime {
    /// The cumulative totals from the map's (`handed`, read first) and the slots' (read
    /// after: a slot handed over in between is in neither for one sample, never in both).
    pub fn sample(
        &mut self,
        handed: impl Iterator<Item = (u32, u64)>,
        slots: impl Iterator<Item = (usize, Option<(u32, u64)>)>,
    ) -> Vec<(u32, u64)> {
        let mut now: HashMap<u32, u64> = HashMap::new();
        for (tgid, ns) in handed {
            *now.entry(tgid).or_default() += ns;
        }
        for (index, read) in slots {
            if self.slots.len() <= index {
                self.slots.resize(index + 1, None);
            }
            let seen = match read {
                Some(read) => {
                    self.slots[index] = Some(read);
                    read
                }
                None => match self.slots[index] {
                    Some(earlier) => earlier,
                    None => continue,
                },
            };
            if seen.0 != 0 && seen.1 != 0 {
                *now.entry(seen.0).or_default() += seen.1;
            }
        }
        if self.last.len() > REMEMBERED {
            self.last.retain(|tgid, _| now.contains_key(tgid));
        }
        for (tgid, ns) in now {
            let last = self.last.entry(tgid).or_default();
            *last = (*last).max(ns);
        }
        self.last.iter().map(|(&tgid, &ns)| (tgid, ns)).collect()
    }

    /// Processes that exited, whose last sample was read.
    pub fn forget(&mut self, exited: impl Iterator<Item = u32>) {
        for tgid in exited {
            self.last.remove(&tgid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(
        d: &mut DTime,
        handed: &[(u32, u64)],
        slots: &[Option<(u32, u64)>],
    ) -> Vec<(u32, u64)> {
        let mut out = d.sample(handed.iter().copied(), slots.iter().copied().enumerate());
        out.sort_unstable();
        out
    }

    #[test]
    fn a_process_sums_its_threads_slots_and_what_was_handed_to_it() {
        let mut d = DTime::default();
        assert_eq!(
            totals(
                &mut d,
                &[(7, 100)],
                &[Some((7, 10)), Some((7, 5)), Some((8, 3))]
            ),
            vec![(7, 115), (8, 3)]
        );
    }

    #[test]
    fn a_slot_seen_changing_hands_counts_as_it_was() {
        let mut d = DTime::default();
        totals(&mut d, &[], &[Some((7, 50))]);
        assert_eq!(totals(&mut d, &[], &[None]), vec![(7, 50)]);
        // Handed over between the two reads: in neither, for one sample; not going back.
        assert_eq!(totals(&mut d, &[], &[Some((9, 0))]), vec![(7, 50)]);
        assert_eq!(totals(&mut d, &[(7, 60)], &[Some((9, 0))]), vec![(7, 60)]);
    }

    #[test]
    fn a_forgotten_process_starts_again_from_what_is_read() {
        let mut d = DTime::default();
        totals(&mut d, &[(7, 500)], &[]);
        d.forget([7].into_iter());
        assert_eq!(totals(&mut d, &[], &[Some((7, 20))]), vec![(7, 20)]);
    }
}
