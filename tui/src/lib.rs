//! iotop-bpf: a live, top-like dashboard of Linux storage I/O built on eBPF.
//!
//! Data flows one way: kernel probes -> ring buffer -> [`feed`] -> [`decode`] -> [`model`]
//! (pure) -> [`model::Snapshot`] -> [`view`] (TUI) | [`report`] (batch text, JSON). The
//! [`pipeline`] drives it for both the live view ([`app`]) and the reports ([`headless`]),
//! from the probes or from a recording.

pub mod app;
pub mod capture;
pub mod cli;
pub mod decode;
pub mod demo;
pub mod feed;
pub mod headless;
pub mod history;
pub mod model;
pub mod offline;
pub mod pipeline;
pub mod probe;
pub mod report;
pub mod shutdown;
pub mod term;
pub mod units;
pub mod view;
pub mod workload;
