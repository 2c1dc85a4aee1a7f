//! The pure model: aggregates block-I/O events into per-process and per-disk figures.
//!
//! Nothing here knows about aya, tokio, ratatui or the clock: time enters only through event
//! timestamps and [`KernelSample::now_ns`], so the same inputs always give the same
//! [`Snapshot`]. That is what lets unit tests feed synthetic streams.

mod aggregator;
pub mod hist;
mod input;
mod snapshot;

pub use aggregator::{Aggregator, Settings};
pub use hist::{LatencyHist, Log2Hist};
pub use input::{BlockIo, Comm, Dev, DiskStat, DiskTotals, KernelCounters, KernelSample, Op};
pub use snapshot::{
    DiskFigures, DiskRow, EventStats, Latency, ProcDeviceRow, ProcFigures, ProcRow, Snapshot,
};

#[cfg(test)]
pub mod fixtures;
#[cfg(test)]
mod tests;
