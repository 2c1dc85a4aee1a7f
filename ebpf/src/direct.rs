//! Loads through the pointers a `tp_btf` program is given. The verifier checks each against
//! BTF (a load that faults reads 0): one instruction, where `bpf_probe_read_kernel` is a
//! helper call, and one that `lockdown=confidentiality` does not refuse. The offset must be
//! a constant the verifier knows: a field of a `.rodata` static, read on its own.

/// The `u32` at `base + offset`.
#[inline(always)]
pub fn load_u32(base: u64, offset: u32) -> u32 {
    // SAFETY: a BTF-checked load from a kernel object (BPF_PROBE_MEM).
    unsafe { core::ptr::read_volatile((base + u64::from(offset)) as *const u32) }
}

/// The `u64` at `base + offset`.
#[inline(always)]
pub fn load_u64(base: u64, offset: u32) -> u64 {
    // SAFETY: as above.
    unsafe { core::ptr::read_volatile((base + u64::from(offset)) as *const u64) }
}
