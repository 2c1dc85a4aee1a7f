//! LEB128 varints, written once: the recording's records (`recording/codec.rs`) and the
//! history's packed histogram columns (`history/`). Seven bits a byte, least significant
//! first, the high bit set on every byte but the last.

/// Appends `v`.
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Why a varint could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// The bytes end inside it.
    Ends,
    /// Ten bytes and still not its last: more than 64 bits.
    TooLong,
}

/// Reads the varint at `bytes[*at..]` and moves `at` past it.
pub fn read(bytes: &[u8], at: &mut usize) -> Result<u64, Bad> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at).ok_or(Bad::Ends)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(Bad::TooLong)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        for v in [0, 1, 0x7f, 0x80, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put(&mut out, v);
            let mut at = 0;
            assert_eq!(read(&out, &mut at), Ok(v), "{v}");
            assert_eq!(at, out.len());
        }
        let mut out = Vec::new();
        put(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        assert_eq!(read(&out[..1], &mut 0), Err(Bad::Ends));
        assert_eq!(read(&[0xff; 11], &mut 0), Err(Bad::TooLong));
    }
}
