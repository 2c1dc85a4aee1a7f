//! Decoding the block tracepoints' `rwbs` string (`blk_fill_rwbs()`).
//!
//! Layout: an optional leading `F` (REQ_PREFLUSH), then the operation (`R`, `W`, `F` flush,
//! `D` discard, `DE` secure erase, `WZ` write-zeroes, `Z?` zone ops, `N` other), then flags:
//! `F` FUA, `A` readahead, `S` sync, `M` meta; `NUL`-terminated. The field is 8, 9 or 10
//! bytes depending on the kernel; every version fits the first [`RWBS_READ_LEN`] bytes.

pub use crate::block::RWBS_READ_LEN;
use crate::block::{
    FLAG_FUA, FLAG_META, FLAG_PREFLUSH, FLAG_READAHEAD, FLAG_SYNC, OP_DISCARD, OP_FLUSH, OP_OTHER,
    OP_READ, OP_WRITE,
};

/// The operation alone: what the probes need for the per-disk counters. Kept to a handful of
/// branches, since the verifier walks every path; user space decodes the flags with
/// [`parse`] from the raw `rwbs` the record carries.
#[inline(always)]
#[must_use]
pub fn op_of(rwbs: &[u8; RWBS_READ_LEN]) -> u8 {
    let first = rwbs[0];
    let second = rwbs[1];
    // "FW...", "FR", "FF": a leading F is PREFLUSH when an operation letter follows.
    let (op, next) = if first == b'F'
        && (second == b'W' || second == b'R' || second == b'F' || second == b'D')
    {
        (second, rwbs[2])
    } else {
        (first, second)
    };
    match op {
        b'R' => OP_READ,
        b'W' if next == b'Z' => OP_OTHER,
        b'W' => OP_WRITE,
        b'F' => OP_FLUSH,
        b'D' if next == b'E' => OP_OTHER,
        b'D' => OP_DISCARD,
        _ => OP_OTHER,
    }
}

/// `(op, flags)` of an `rwbs` string. Pure and `no_std`; used by user space.
#[must_use]
pub fn parse(rwbs: &[u8; RWBS_READ_LEN]) -> (u8, u8) {
    let mut flags = 0u8;
    let mut i = 0usize;
    // A leading F is PREFLUSH only when an operation letter follows it ("FWS", "FF"); a
    // lone "F" is the flush operation itself.
    if rwbs[0] == b'F' && matches!(rwbs[1], b'W' | b'R' | b'F' | b'D') {
        flags |= FLAG_PREFLUSH;
        i = 1;
    }
    let op = match rwbs[i] {
        b'R' => OP_READ,
        b'W' => {
            if rwbs[i + 1] == b'Z' {
                i += 1;
                OP_OTHER
            } else {
                OP_WRITE
            }
        }
        b'F' => OP_FLUSH,
        b'D' => {
            if rwbs[i + 1] == b'E' {
                i += 1;
                OP_OTHER
            } else {
                OP_DISCARD
            }
        }
        b'Z' => {
            i += 1;
            OP_OTHER
        }
        _ => OP_OTHER,
    };
    i += 1;
    while i < RWBS_READ_LEN {
        match rwbs[i] {
            0 => break,
            b'F' => flags |= FLAG_FUA,
            b'A' => flags |= FLAG_READAHEAD,
            b'S' => flags |= FLAG_SYNC,
            b'M' => flags |= FLAG_META,
            _ => {}
        }
        i += 1;
    }
    (op, flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> (u8, u8) {
        let mut buf = [0u8; RWBS_READ_LEN];
        buf[..s.len()].copy_from_slice(s.as_bytes());
        parse(&buf)
    }

    #[test]
    fn decodes_the_strings_block_tracepoints_print() {
        assert_eq!(p("R"), (OP_READ, 0));
        assert_eq!(p("RA"), (OP_READ, FLAG_READAHEAD));
        assert_eq!(p("RM"), (OP_READ, FLAG_META));
        assert_eq!(p("WS"), (OP_WRITE, FLAG_SYNC));
        assert_eq!(p("WSM"), (OP_WRITE, FLAG_SYNC | FLAG_META));
        assert_eq!(p("WFS"), (OP_WRITE, FLAG_FUA | FLAG_SYNC));
        assert_eq!(
            p("FWFSM"),
            (OP_WRITE, FLAG_PREFLUSH | FLAG_FUA | FLAG_SYNC | FLAG_META)
        );
        assert_eq!(p("FF"), (OP_FLUSH, FLAG_PREFLUSH));
        assert_eq!(p("F"), (OP_FLUSH, 0));
        assert_eq!(p("FS"), (OP_FLUSH, FLAG_SYNC));
        assert_eq!(p("D"), (OP_DISCARD, 0));
        assert_eq!(p("DE"), (OP_OTHER, 0));
        assert_eq!(p("WZ"), (OP_OTHER, 0));
        assert_eq!(p("ZRS"), (OP_OTHER, FLAG_SYNC));
        assert_eq!(p("N"), (OP_OTHER, 0));
        assert_eq!(p(""), (OP_OTHER, 0));
    }

    #[test]
    fn op_of_agrees_with_parse() {
        for s in [
            "R", "RA", "WS", "WSM", "WFS", "FWFSM", "FF", "F", "FS", "D", "DE", "WZ", "ZRS", "N",
            "", "FR", "FD",
        ] {
            let mut buf = [0u8; RWBS_READ_LEN];
            buf[..s.len()].copy_from_slice(s.as_bytes());
            assert_eq!(op_of(&buf), parse(&buf).0, "{s:?}");
        }
    }

    #[test]
    fn reads_no_further_than_the_buffer() {
        assert_eq!(p("WSSSSSSS"), (OP_WRITE, FLAG_SYNC));
        assert_eq!(p("FWFFFFFF"), (OP_WRITE, FLAG_PREFLUSH | FLAG_FUA));
    }
}
