//! What the viewer chose: focus, sort, filter, selection, pause. The only mutable input of
//! rendering; the data itself comes from the [`Snapshot`](crate::model::Snapshot).

use crate::model::Dev;

/// The pane that has the keyboard (Tab: processes, findings, disks; Shift-Tab back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Focus {
    #[default]
    Processes,
    Findings,
    Disks,
}

/// Process table sort keys, in column order (`<` and `>` move along this list).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SortKey {
    Pid,
    Comm,
    ReadOps,
    WriteOps,
    ReadBytes,
    WriteBytes,
    #[default]
    TotalBytes,
    P50,
    P99,
    Syncs,
    SyncP99,
    Amplification,
    DState,
}

impl SortKey {
    pub const ALL: [Self; 13] = [
        Self::Pid,
        Self::Comm,
        Self::ReadOps,
        Self::WriteOps,
        Self::ReadBytes,
        Self::WriteBytes,
        Self::TotalBytes,
        Self::P50,
        Self::P99,
        Self::Syncs,
        Self::SyncP99,
        Self::Amplification,
        Self::DState,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Pid => "PID",
            Self::Comm => "COMM",
            Self::ReadOps => "R/s",
            Self::WriteOps => "W/s",
            Self::ReadBytes => "RMB/s",
            Self::WriteBytes => "WMB/s",
            Self::TotalBytes => "I/O MB/s",
            Self::P50 => "p50",
            Self::P99 => "p99",
            Self::Syncs => "SYNC/s",
            Self::SyncP99 => "sync p99",
            Self::Amplification => "AMP",
            Self::DState => "time in D",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|&k| k == self).unwrap_or(0)
    }

    pub fn next(self) -> Self {
        Self::ALL[(self.index() + 1) % Self::ALL.len()]
    }

    pub fn prev(self) -> Self {
        Self::ALL[(self.index() + Self::ALL.len() - 1) % Self::ALL.len()]
    }

    /// Names and pids read best ascending, rates and latencies descending.
    pub fn descending_by_default(self) -> bool {
        !matches!(self, Self::Pid | Self::Comm)
    }
}

/// The latency a heat map shows (`l` cycles them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HeatKind {
    /// Created to completed.
    Total,
    /// Created to issued.
    Queue,
    /// Issued to completed.
    #[default]
    Device,
    /// A process's sync calls (fsync and friends).
    Sync,
}

impl HeatKind {
    pub fn next(self) -> Self {
        match self {
            Self::Total => Self::Queue,
            Self::Queue => Self::Device,
            Self::Device => Self::Sync,
            Self::Sync => Self::Total,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct UiState {
    pub focus: Focus,
    pub sort: SortKey,
    /// Flip the key's natural direction.
    pub reversed: bool,
    /// Case-insensitive substring of the comm, or an exact pid.
    pub filter: String,
    /// The filter is being typed.
    pub editing_filter: bool,
    /// Selection by identity, so rows can move under it without the selection jumping.
    pub selected_pid: Option<u32>,
    pub selected_disk: Option<Dev>,
    /// Show totals since start instead of the last interval.
    pub cumulative: bool,
    /// One row per cgroup instead of per process (the `C` key).
    pub by_cgroup: bool,
    /// Keep showing the same snapshot (the model keeps counting underneath).
    pub paused: bool,
    pub show_help: bool,
    /// The drill-down of the selected process (Enter).
    pub show_detail: bool,
    /// The findings pane's selection: a line (one finding, or several folded over pids) by
    /// its identity, so it stays on the same finding as the list reorders.
    pub selected_finding: Option<super::findings::GroupKey>,
    /// The selected finding's full text (Enter in the findings pane).
    pub show_finding: bool,
    /// Lines scrolled in the finding's full text (j/k while it is open).
    pub scroll: u16,
    /// Host and kernel, for the status bar.
    pub host: String,
    pub kernel: String,
    /// Degraded sources, shown once in the status line.
    pub notes: Vec<String>,
    /// The bottom pane shows the latency heat map over time instead of the histograms.
    pub show_heatmap: bool,
    pub heat_kind: HeatKind,
    /// While paused: how many intervals before the newest the screen shows (stepping back).
    pub back: u64,
    /// Wall clock (ms since the epoch) at the run's start: the time of an interval on screen.
    pub started_unix_ms: u64,
    /// A one-off message for the key line (where a screen capture went); cleared by a key.
    pub message: Option<String>,
    /// What to look at now (the demo's caption), on the key line until replaced.
    pub caption: Option<String>,
    /// This screen is a second viewer's (`iotop-bpf attach`): its link to the running tool.
    pub link: Option<Link>,
}

/// An attached viewer's link to the tool it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// Receiving its intervals; `lost`: frames the tool dropped because this viewer read
    /// them too slowly.
    Attached { lost: u64 },
    /// The tool went away or cannot be reached (why); the viewer keeps trying.
    Lost { why: String },
}
