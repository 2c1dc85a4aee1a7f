//! Deterministic pseudo-random garbage for the decoders' "never panics" tests (the recording's
//! codec, the ring's records): one generator, so every decoder is fed the same way.

/// Byte strings of each length in `lengths`, in order, from one xorshift64 stream (the same
/// seed each time, so a failure replays).
pub fn garbage(lengths: std::ops::Range<usize>) -> impl Iterator<Item = Vec<u8>> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    lengths.map(move |len| {
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    })
}
