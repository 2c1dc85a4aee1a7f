//! Wire types shared by the iotop-bpf eBPF programs (kernel side) and the user-space tool.
//!
//! Everything that crosses the kernel/user boundary lives here: ring-buffer records, map
//! keys and values, tracepoint field offsets handed to the programs, and the few pure
//! helpers both sides must agree on (`rwbs` decoding, log2 histogram slots).
//!
//! Rules for wire types: `#[repr(C)]`, no implicit padding (explicit `_pad` fields that are
//! always zeroed), no `bool`, `Option` or Rust `enum`; codes are `u8`/`u32` constants.
#![no_std]

pub mod abi;
pub mod aggregate;
pub mod assoc;
pub mod blame;
pub mod block;
pub mod dio;
pub mod dstate;
pub mod hist;
pub mod maps;
pub mod process;
pub mod raw;
pub mod rwbs;
pub mod sync;
pub mod throttle;
pub mod tracepoint;

pub use abi::*;
