//! iotop-bpf kernel side: block-request tracepoints paired in the kernel, and the probes of
//! every other pane (D state, sync calls, durability, direct I/O, throttling, blame).
//!
//! Creation (`block_io_start`, or `block_rq_insert` before 6.5) records who submitted a
//! request and when; `block_rq_issue` records when the driver got it; `block_rq_complete`
//! emits one [`BlockIoRecord`] per completed request into the `EVENTS` ring buffer and adds it
//! to the per-disk aggregates. Issue and completion are `tp_btf` programs reading the request
//! by direct loads (`raw.rs`), with raw twins for kernels that refuse them and classic
//! tracepoints (`block.rs`) where BTF is missing. Offsets come from BTF or tracefs, through
//! `.rodata` globals the loader sets.
#![no_std]
#![feature(core_intrinsics)]
#![feature(asm_experimental_arch)]
#![expect(
    internal_features,
    reason = "atomic add: core's atomics need compare-and-swap, which the BPF target lacks"
)]
#![no_main]

mod aggregate;
mod blame;
mod block;
mod dio;
mod direct;
mod durable;
mod emit;
mod exit;
mod fields;
mod file;
mod inflight;
mod kiocb;
mod raw;
mod sched;
mod sync;
mod syscall;
mod throttle;
mod verifier;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any program that could reach this; it exists to satisfy no_std.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
