//! The pure model: aggregates block-I/O events into per-process and per-disk figures.
//!
//! Nothing here knows about aya, tokio, ratatui or the clock: time enters only through event
//! timestamps and [`KernelSample::now_ns`], so the same inputs always give the same
//! [`Snapshot`]. That is what lets unit tests feed synthetic streams.

mod aggregator;
mod blame;
mod dstate;
pub mod findings;
pub mod hist;
mod input;
mod patterns;
mod snapshot;
mod sync;

pub use aggregator::{Aggregator, Settings};
pub use blame::GRACE_NS;
pub use hist::{LatencyHist, Log2Hist};
pub use input::{
    BlockIo, Comm, DStateEpisode, DStateNow, Dev, DioCall, DiskStat, DiskTotals, FileRef,
    KernelCounters, KernelSample, Op, SyncCall, SyncKind,
};
pub use snapshot::{
    DStateEpisodeRow, DStateTask, DioFigures, DiskFigures, DiskRow, EventStats, Latency, Party,
    ProcDeviceRow, ProcFigures, ProcRow, Snapshot, SyncCallRow, SyncFigures, wait_site,
};

#[cfg(test)]
pub mod fixtures;
#[cfg(test)]
mod tests;
