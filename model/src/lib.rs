//! The pure model: folds decoded events and kernel samples into per-process and per-disk
//! figures, judges each sync call's cost, and names pathological patterns.
//!
//! Nothing here knows about aya, tokio, ratatui, the terminal or the clock: time enters only
//! through event timestamps and [`KernelSample::now_ns`], so the same [`Input`]s always give
//! the same [`Snapshot`]s. That is what lets unit tests feed synthetic streams and a replay
//! reproduce a live run exactly.

mod aggregator;
pub mod baseline;
mod disks;
mod dstate;
mod finding;
pub mod findings;
pub mod hist;
mod host;
mod input;
pub mod labels;
mod ledger;
mod patterns;
mod procs;
pub mod quantity;
mod snapshot;
mod summed;
mod sync;
pub mod throttle;

pub use aggregator::Aggregator;
pub use hist::{Histogram, Latency, Log2Hist, SizeHist};
pub use input::{
    BlockIo, CgroupInfo, Comm, CpuJiffies, DStateEpisode, DStateNow, Dev, DioCall, DioCallTotals,
    Dirtier, DirtyPauseTotals, DirtySettings, DiskGeometry, DiskStat, DiskTotals, FileKey, FileRef,
    HostSample, Input, IoLimit, IoLimits, KernelCounters, KernelSample, LimitKind, LoadAvg,
    NoStack, Op, ProcDiskTotals, ProcReadTotals, ProcessExit, SampleKind, SelfCost, SyncCall,
    SyncKind, WakeupStack,
};
pub use ledger::{GRACE_NS, SETTLE_NS};
pub use procs::Settings;
pub use snapshot::{
    CallDisk, CallFigures, CallLatency, CgroupSum, DStateEpisodeRow, DStateTask, DioFigures,
    DirtyFigures, DiskFigures, DiskRow, EventStats, HostFigures, NO_CGROUP, Party, ProcDeviceRow,
    ProcFigures, ProcRow, ReadFigures, SiteCounts, Snapshot, SyncCallRow, SyncFigures,
    SyncPopulation, SyncedFiles, WaitFigures, Waits, cgroups, wait_site,
};

/// A hash map with a fast hash, for the maps every event touches (keys are pids, device
/// numbers and file identities from the kernel; SipHash was 16% of the tool's CPU).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Synthetic snapshots for tests, here and in the binary (its dev-dependency turns on the
/// `fixtures` feature).
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
#[cfg(test)]
mod tests;
