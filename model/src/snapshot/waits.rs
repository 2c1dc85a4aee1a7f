//! What a process waited on besides its requests: direct I/O calls and dirty-page throttling
//! (moved out of `snapshot.rs` to keep it short).

use super::*;

/// Percentiles of direct I/O call latency (from the kernel's quarter-octave histogram:
/// within ~12% of the true value).
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallLatency {
    pub count: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
}

impl CallLatency {
    pub fn of(hist: &CallHist) -> Self {
        Self {
            count: hist.calls,
            mean_ns: hist.mean_ns(),
            p50_ns: hist.quantile(0.50),
            p99_ns: hist.quantile(0.99),
            p999_ns: hist.quantile(0.999),
        }
    }
}

/// A process's direct I/O calls on one disk over a period.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct CallDisk {
    pub disk: Dev,
    pub latency: CallLatency,
    /// Time spent in the calls, summed (exact).
    pub time_ns: u64,
    /// The request latency the calls are compared with: the p99 of the process's own requests
    /// in the interval (`own_requests`), or of the disk's when it created too few (0 when
    /// neither is known).
    pub request_p99_ns: u64,
    pub own_requests: bool,
    /// Call time beyond that reference, summed over calls (see `model::throttle`).
    pub prequeue_ns: u64,
}

/// A process's direct I/O calls (`iomap_dio_rw_begin` to `iomap_dio_complete`: synchronous,
/// libaio and io_uring direct I/O on iomap filesystems such as ext4 and XFS; raw block
/// devices do not go through iomap) over a period.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct CallFigures {
    pub latency: CallLatency,
    pub time_ns: u64,
    /// Call time not spent in a request (the wait before the request: blk-throttle, iocost,
    /// a full request queue), summed over its disks.
    pub prequeue_ns: u64,
    /// Per disk (the disks of the calls' filesystems), most calls first.
    pub disks: Vec<CallDisk>,
}

impl CallFigures {
    /// The share of call time spent outside requests (0 without calls).
    pub fn prequeue_share(&self) -> f64 {
        #[expect(clippy::cast_precision_loss, reason = "a ratio")]
        let share = self.prequeue_ns as f64 / self.time_ns.max(1) as f64;
        share.min(1.0)
    }
}

/// What a process waited for outside its requests over a period.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitFigures {
    /// Every direct I/O call's latency (begin to completion) and the time it spent outside
    /// any request: the wait before the request.
    pub calls: CallFigures,
    /// The pauses dirty throttling imposed on its buffered writers.
    pub dirty: DirtyFigures,
}

/// [`WaitFigures`], boxed only for a process that made direct I/O calls or was paused: most
/// rows have neither, and every row is kept many times over in the live view's history.
/// Reads as a `WaitFigures` (empty without calls or pauses).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Waits(Option<Box<WaitFigures>>);

static NO_WAITS: WaitFigures = WaitFigures {
    calls: NO_CALLS,
    dirty: DirtyFigures {
        pauses: 0,
        pause_ns: 0,
    },
};

const NO_CALLS: CallFigures = CallFigures {
    latency: CallLatency {
        count: 0,
        mean_ns: 0,
        p50_ns: 0,
        p99_ns: 0,
        p999_ns: 0,
    },
    time_ns: 0,
    prequeue_ns: 0,
    disks: Vec::new(),
};

impl Waits {
    pub fn new(calls: CallFigures, dirty: DirtyFigures) -> Self {
        let any = calls.latency.count > 0 || !calls.disks.is_empty() || dirty.pauses > 0;
        Self(any.then(|| Box::new(WaitFigures { calls, dirty })))
    }

    /// Heap bytes it holds.
    pub fn heap_bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |w| {
            size_of::<WaitFigures>() + w.calls.disks.len() * size_of::<CallDisk>()
        })
    }
}

impl std::ops::Deref for Waits {
    type Target = WaitFigures;

    fn deref(&self) -> &WaitFigures {
        self.0.as_deref().unwrap_or(&NO_WAITS)
    }
}

/// Pauses `balance_dirty_pages()` imposed on a process's writers over a period.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirtyFigures {
    pub pauses: u64,
    /// Summed over its threads.
    pub pause_ns: u64,
}

/// Direct I/O calls the probes streamed (those not aligned to the largest filesystem or
/// physical block size in use), and the zeroing they make the kernel do.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct DioFigures {
    pub calls: u64,
    /// Bytes those calls asked for.
    pub data_bytes: u64,
    /// Calls whose tail (head) the kernel must zero, and the bytes it zeroes.
    pub tail_writes: u64,
    pub tail_bytes: u64,
    pub head_writes: u64,
    pub head_bytes: u64,
    /// Predicted tail pads: (bytes, calls), ascending.
    pub pads: Vec<(u64, u64)>,
    /// Write requests exactly the size of a predicted pad that end on a filesystem block
    /// boundary: the zeroing write seen alone.
    pub pad_requests: u64,
    /// Write requests that start inside a filesystem block and end on its boundary: the
    /// zeroing write merged into its data write by the block layer.
    pub block_finishing_requests: u64,
    /// Calls not aligned to the device's physical block size.
    pub unaligned_calls: u64,
    /// Unaligned writes inside the file, where zeroing happens only if their blocks are
    /// unwritten extents (preallocated): the write requests that showed it (the zero write
    /// alone or merged with the data), the bytes zeroed, and one such write (offset, size).
    pub inside_calls: u64,
    pub inside_zeroing_requests: u64,
    pub inside_zeroed_bytes: u64,
    pub inside_example: Option<(u64, u64)>,
    pub physical_block_size: u32,
    pub fs_block_size: u32,
    pub disk: Option<Dev>,
    /// The file of the most recent call: its path when known, else `inode N`.
    pub file: Option<String>,
    /// (pos, count, tail pad) of the first zeroing write.
    pub example: Option<(u64, u64, u64)>,
}
