//! The slot choice of the probes' set-associative tables (requests in flight, D episodes,
//! direct I/O calls in flight): arrays split into sets of a few ways, where a key may live in
//! any way of its set. Written once, here, so that the rule is unit-tested on the host and
//! the probes only say how to read a way.

/// Where a key goes in its set, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// The way already holding the key.
    Own(usize),
    /// The first way never used.
    Unused(usize),
    /// The first way whose entry ended (its key may still be there).
    Freed(usize),
    /// None of the above: the set's first way, whose entry is dropped (the caller counts it).
    Evicted(usize),
}

impl Way {
    /// The way's index, below `WAYS` (a power of two) by construction; masked so that the
    /// eBPF verifier sees the bound too.
    #[inline(always)]
    #[must_use]
    pub const fn index<const WAYS: usize>(self) -> usize {
        let (Self::Own(way) | Self::Unused(way) | Self::Freed(way) | Self::Evicted(way)) = self;
        way & (WAYS - 1)
    }
}

/// The way of a set of `WAYS` ways whose key is this key (`holds(way)`), if any, masked below
/// `WAYS` like [`Way::index`].
#[inline(always)]
pub fn position<const WAYS: usize>(holds: impl Fn(usize) -> bool) -> Option<usize> {
    let mut way = 0;
    while way < WAYS {
        if holds(way) {
            return Some(way & (WAYS - 1));
        }
        way += 1;
    }
    None
}

/// Chooses the way of a key in a set of `WAYS` ways: its own, else the first never used,
/// else the first whose entry ended, else the first. `holds(way)`: the way's key is this key;
/// `unused(way)`: the way was never used; `ended(way)`: its entry ended. One pass over the
/// keys in the common cases; `ended` (which may read another cache line) only when the set
/// has no room otherwise.
#[inline(always)]
pub fn choose<const WAYS: usize>(
    holds: impl Fn(usize) -> bool,
    unused: impl Fn(usize) -> bool,
    ended: impl Fn(usize) -> bool,
) -> Way {
    let mut first_unused = None;
    let mut way = 0;
    while way < WAYS {
        if holds(way) {
            return Way::Own(way);
        }
        if first_unused.is_none() && unused(way) {
            first_unused = Some(way);
        }
        way += 1;
    }
    if let Some(way) = first_unused {
        return Way::Unused(way);
    }
    let mut way = 0;
    while way < WAYS {
        if ended(way) {
            return Way::Freed(way);
        }
        way += 1;
    }
    Way::Evicted(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A set of four ways: `Some((key, ended))`, or `None` never used.
    fn choose_in(set: [Option<(u32, bool)>; 4], key: u32) -> Way {
        choose::<4>(
            |w| set[w].is_some_and(|(k, _)| k == key),
            |w| set[w].is_none(),
            |w| set[w].is_some_and(|(_, ended)| ended),
        )
    }

    #[test]
    fn a_key_finds_its_own_way_even_after_an_unused_one() {
        let set = [None, Some((7, true)), Some((9, false)), None];
        assert_eq!(choose_in(set, 9), Way::Own(2));
        assert_eq!(
            choose_in(set, 7),
            Way::Own(1),
            "an ended entry's key is reused"
        );
    }

    #[test]
    fn position_finds_the_key_or_nothing() {
        let keys = [3, 0, 7, 7];
        assert_eq!(position::<4>(|w| keys[w] == 7), Some(2), "the first holder");
        assert_eq!(position::<4>(|w| keys[w] == 5), None);
    }

    #[test]
    fn a_new_key_takes_the_first_unused_way_before_an_ended_one() {
        let set = [Some((1, true)), Some((2, false)), None, None];
        assert_eq!(choose_in(set, 5), Way::Unused(2));
    }

    #[test]
    fn a_full_set_reuses_an_ended_entry_and_evicts_only_when_all_are_live() {
        let ended = [
            Some((1, false)),
            Some((2, false)),
            Some((3, true)),
            Some((4, true)),
        ];
        assert_eq!(choose_in(ended, 5), Way::Freed(2));
        let live = [
            Some((1, false)),
            Some((2, false)),
            Some((3, false)),
            Some((4, false)),
        ];
        assert_eq!(choose_in(live, 5), Way::Evicted(0));
    }

    #[test]
    fn every_way_index_is_below_the_set_size() {
        for way in [Way::Own(3), Way::Unused(1), Way::Freed(2), Way::Evicted(0)] {
            assert!(way.index::<4>() < 4);
        }
        assert_eq!(Way::Own(3).index::<4>(), 3);
    }
}
