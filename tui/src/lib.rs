//! iotop-bpf: a live, top-like dashboard of Linux storage I/O built on eBPF.
//!
//! Data flows one way: kernel probes -> ring buffer -> [`feed`] (decode, annotate) -> [`model`]
//! (pure) -> [`model::Snapshot`] -> [`view`] (TUI) | [`report`] (batch text, JSON). The
//! [`pipeline`] drives it for the live view ([`app`]), the reports ([`headless`]) and the
//! metrics daemon ([`serve`]), from the probes or from a recording; the Prometheus
//! [`export`]er taps the pipeline's snapshots.

pub mod app;
pub mod attach;
pub mod capture;
pub mod cli;
pub mod clock;
pub mod demo;
pub mod export;
pub mod feed;
pub mod generate;
pub mod headless;
pub mod heap;
pub mod history;
pub mod offline;
pub mod pipeline;
pub mod probe;
pub mod report;
pub mod serve;
pub mod shutdown;
pub mod term;
pub mod units;
pub mod view;
pub mod viewers;
pub mod workload;

/// The pure model is its own crate (`model/`), so its purity is a compile-time fact; it is
/// named `model` here as it always was.
pub use iotop_bpf_model as model;
