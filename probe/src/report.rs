//! What the probes' load came to: where each program sits, and what is degraded here.

use crate::plan;

/// Which tracepoint each program sits on, and what is degraded on this kernel.
#[derive(Clone, Debug, Default)]
pub struct ProbeReport {
    /// Raw or classic tracepoints for the block probes, and why.
    pub mode: String,
    /// Where the system-call probes run, and why.
    pub syscall_path: String,
    pub attached: Vec<String>,
    /// Human-readable notes on missing sources, e.g. attribution falling back.
    pub degraded: Vec<String>,
    /// Direct I/O call latency can be measured (both iomap probes attached); the feed turns
    /// it on and off (`CALL_LATENCY_ON`).
    pub call_latency: bool,
    /// Every way to make data durable, and how it is traced here or why not.
    pub sync_sources: Vec<plan::SyncSource>,
    /// The verifier's whole log for each program the kernel refused (`check --verbose`).
    pub refused: Vec<(String, String)>,
}
