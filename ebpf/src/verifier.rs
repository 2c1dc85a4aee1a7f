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

/// Set by the loader (`IOTOP_BPF_FAULT=reject-dstate`) to make the D-state switch probe read
/// past its context, which every verifier refuses: the tests prove with a real rejection that
/// a probe the kernel refuses degrades its pane and nothing else. While 0 (always, outside
/// those tests) the verifier, which knows the value, drops the read as dead code.
#[unsafe(no_mangle)]
static FAULT_INJECT: aya_ebpf::Global<u32> = aya_ebpf::Global::new(0);

/// Reads beyond a (raw or BTF) tracepoint's arguments if [`FAULT_INJECT`] is `fault`.
#[inline(always)]
pub fn inject(ctx: &impl aya_ebpf::EbpfContext, fault: u32) {
    if FAULT_INJECT.load() == fault {
        // SAFETY: never runs: the verifier refuses the program first.
        unsafe { core::ptr::read_volatile((ctx.as_ptr() as *const u64).add(64)) };
    }
}
