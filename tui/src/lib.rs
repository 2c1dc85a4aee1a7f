//! iotop-bpf: a live, top-like dashboard of Linux storage I/O built on eBPF.
//!
//! Data flows one way: kernel probes -> ring buffer -> [`feed`] (decode, annotate) -> [`model`]
//! (pure) -> [`model::Snapshot`] -> `view` (TUI) | `report` (batch text, JSON). The
//! [`pipeline`] drives it for the commands in [`front`] (the live view, the batch reports, the
//! metrics daemon, the offline report, the demo), from the probes or from a recording; the
//! Prometheus [`export`]er taps the pipeline's snapshots.

// `pub` only for what `main.rs` (the binary, a crate of its own) names; the rest is
// `pub(crate)`, so the compiler reports an item nobody uses instead of taking it for API.
pub mod cli;
pub(crate) mod clock;
pub mod export;
pub mod feed;
pub mod front;
pub mod generate;
pub(crate) mod heap;
pub(crate) mod history;
pub mod pipeline;
pub mod probe;
pub(crate) mod report;
pub(crate) mod shutdown;
pub(crate) mod term;
pub(crate) mod units;
pub(crate) mod view;
pub mod viewers;
pub mod workload;

/// The pure model is its own crate (`model/`), so its purity is a compile-time fact; it is
/// named `model` here as it always was.
pub use iotop_bpf_model as model;
