//! What a finding is: its kind, severity, subject, evidence and text (the snapshot carries
//! them). The detectors that make them and the book that keeps them are `findings/`, which
//! imports this, never the reverse.

use crate::Dev;

#[derive(
    serde::Serialize, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub enum FindingKind {
    SubBlockTailWrite,
    WriteAmplification,
    UnalignedDirectIo,
    SyncStorm,
    QueueDominated,
    BimodalLatency,
    SmallRandomIo,
    FlushHeavy,
    LongDState,
    IoThrottled,
    DirtyThrottled,
    EmptySyncs,
    NoisyNeighbour,
    ReadAmplification,
}

impl FindingKind {
    /// The name in JSON and on screen (a public contract).
    pub fn name(self) -> &'static str {
        match self {
            Self::SubBlockTailWrite => "sub_block_tail_write",
            Self::WriteAmplification => "write_amplification",
            Self::UnalignedDirectIo => "unaligned_direct_io",
            Self::SyncStorm => "sync_storm",
            Self::QueueDominated => "queue_dominated",
            Self::BimodalLatency => "bimodal_latency",
            Self::SmallRandomIo => "small_random_io",
            Self::FlushHeavy => "flush_heavy",
            Self::LongDState => "long_d_state",
            Self::IoThrottled => "io_throttled",
            Self::DirtyThrottled => "dirty_throttled",
            Self::EmptySyncs => "empty_syncs",
            Self::NoisyNeighbour => "noisy_neighbour",
            Self::ReadAmplification => "read_amplification",
        }
    }

    pub const ALL: [Self; 14] = [
        Self::SubBlockTailWrite,
        Self::WriteAmplification,
        Self::UnalignedDirectIo,
        Self::SyncStorm,
        Self::QueueDominated,
        Self::BimodalLatency,
        Self::SmallRandomIo,
        Self::FlushHeavy,
        Self::LongDState,
        Self::IoThrottled,
        Self::DirtyThrottled,
        Self::EmptySyncs,
        Self::NoisyNeighbour,
        Self::ReadAmplification,
    ];
}

#[derive(
    serde::Serialize, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }

    /// `CRIT`, `WARN`, `INFO`: as the live view, its screen capture and the HTML report
    /// write it (the text report and the JSON write [`Severity::name`]).
    pub fn short(self) -> &'static str {
        match self {
            Self::Critical => "CRIT",
            Self::Warning => "WARN",
            Self::Info => "INFO",
        }
    }
}

/// A number or a word backing a finding.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub enum Evidence {
    Count(u64),
    Ratio(f64),
    Text(String),
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
pub struct Finding {
    pub kind: FindingKind,
    pub severity: Severity,
    pub tgid: Option<u32>,
    pub comm: String,
    pub dev: Option<Dev>,
    /// The files involved, where known (paths, or `inode N`), the main one first.
    pub files: Vec<String>,
    /// One line: what happens, to whom, how much.
    pub summary: String,
    #[serde(deserialize_with = "crate::labels::pairs")]
    pub evidence: Vec<(crate::labels::Label, Evidence)>,
    /// One line: the mechanism.
    pub why: String,
    /// One line: what to do about it.
    pub fix: String,
    /// Seen in the interval just closed (else fading).
    pub active: bool,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// Consecutive intervals it must be seen in before it is listed: 1, or more where one
    /// interval's evidence cannot tell a pattern from a one-off (`INFO` findings wait
    /// [`crate::findings::INFO_MIN_STREAK`] in any case). The book's concern, not part of
    /// what was found
    /// (not sent to viewers: a viewer's book does not judge).
    #[serde(skip, default = "one_interval")]
    pub(crate) persist: u32,
}

fn one_interval() -> u32 {
    1
}

impl Finding {
    pub fn file(&self) -> Option<&str> {
        self.files.first().map(String::as_str)
    }
}
