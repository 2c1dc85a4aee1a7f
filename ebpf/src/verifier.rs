//! Helpers that keep the programs loadable on older verifiers.
//!
//! Each is one real instruction in inline asm: an empty asm block would leave a source line
//! with no instruction, and the kernel refuses line info that does not advance
//! ("Invalid line_info ... prev_offset").

/// `i` masked to `0..N` (`N` a power of two), right where the index is used.
///
/// Where LLVM can prove an index is in range (the branch-free `log2_slot` clamps with
/// `(a & m) | (b & !m)`), it drops a plain mask; 6.1's verifier loses the bounds of an OR
/// whose operands may look negative and refuses `map_value + index` ("math between
/// map_value pointer and register with unbounded min value"). The mask in asm cannot be
/// dropped, and every verifier bounds its result.
#[inline(always)]
pub fn index<const N: usize>(i: usize) -> usize {
    const { assert!(N.is_power_of_two() && N <= 1 << 30) };
    let mut v = i as u64;
    // SAFETY: one ALU instruction on a register.
    unsafe {
        core::arch::asm!("{v} &= {m}", v = inout(reg) v, m = const N - 1, options(pure, nomem, nostack));
    }
    v as usize
}

/// `v`, opaque to the compiler: a bounds check written after it is emitted on the very
/// register that is then used (LLVM may otherwise test a copy, or drop a check it proved).
#[inline(always)]
pub fn opaque(v: usize) -> usize {
    let mut v = v as u64;
    // SAFETY: a register move onto itself.
    unsafe { core::arch::asm!("{0} = {0}", inout(reg) v, options(pure, nomem, nostack)) };
    v as usize
}
