//! iotop-bpf: a live, top-like dashboard of Linux storage I/O built on eBPF.
//!
//! Data flows one way: kernel probes -> ring buffer -> [`feed`] (decode, annotate) -> [`model`]
//! (pure) -> [`model::Snapshot`] -> [`view`] (TUI) | [`report`] (batch text, JSON). The
//! [`pipeline`] drives it for the commands in [`front`] (the live view, the batch reports, the
//! metrics daemon, the offline report, the demo), from the probes or from a recording; the
//! Prometheus [`export`]er taps the pipeline's snapshots.

pub mod cli;
pub mod clock;
pub mod export;
pub mod feed;
pub mod front;
pub mod generate;
pub mod heap;
pub mod history;
pub mod pipeline;
pub mod probe;
pub mod report;
pub mod shutdown;
pub mod term;
pub mod units;
pub mod view;
pub mod viewers;
pub mod workload;

/// The pure model is its own crate (`model/`), so its purity is a compile-time fact; it is
/// named `model` here as it always was.
pub use iotop_bpf_model as model;
