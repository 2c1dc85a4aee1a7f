//! Where a direct I/O call's `kiocb`, `iov_iter` and inode keep what the probes read, as
//! the loader found it in BTF. Both the call's probe (`dio.rs`) and its latency's
//! (`throttle.rs`) read a kiocb, so the layout sits below both.

use aya_ebpf::Global;
use iotop_bpf_common::dio::RawDioOffsets;

use crate::file::read;

#[unsafe(no_mangle)]
pub static RAW_DIO_OFFSETS: Global<RawDioOffsets> = Global::new(RawDioOffsets::ZERO);

/// The `struct file *` of a kiocb.
#[inline(always)]
pub fn iocb_file(iocb: u64) -> Result<u64, ()> {
    read::<u64>(iocb, RAW_DIO_OFFSETS.load().iocb_filp)
}
