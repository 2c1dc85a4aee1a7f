//! The commands, together: each drives the pipeline (or, for `attach`, a viewer's link) to
//! its own end. Nothing below imports them; the dispatch in `lib.rs` picks one.
//!
//! - [`app`]: the live view (its state machine, its front end of `pipeline::drive` and its loop
//!   over a viewer's link `app::drive`, and `w`'s [`capture`]);
//! - [`attach`]: the live view of another run's intervals, over the viewers' socket;
//! - [`watch`]: the default command whole: the live probes or a recording, into the live
//!   view or `--batch`, with the exporter and the viewers' socket when asked;
//! - [`batch`]: `--batch` and `--json`, the intervals printed as text or NDJSON;
//! - [`check`]: what the kernel supports and what is degraded;
//! - [`serve`]: no screen, the pipeline for the exporter and the viewers;
//! - [`report_cmd`]: `iotop-bpf report`, a recording drawn as an HTML page or an SVG;
//! - [`demo`]: the built-in workloads on scratch filesystems, shown in the live view or batch.

pub mod app;
pub mod attach;
pub mod batch;
pub mod capture;
pub mod check;
pub mod demo;
pub mod report_cmd;
pub mod serve;
pub mod watch;

/// After a replay of `intervals` intervals: what it met, on stderr (a file cut short, an
/// early end, the recorder's gaps and stop); damage in the middle of a file is the error
/// (exit 1), once everything before it was shown, and so is a recording that ends before
/// its first whole interval.
pub fn replay_ended(pipeline: &crate::pipeline::Pipeline, intervals: u64) -> anyhow::Result<()> {
    let mut damaged = None;
    for note in pipeline.replay_notes() {
        if (note.damaged() || (intervals == 0 && note.ends_early())) && damaged.is_none() {
            damaged = Some(note.line());
        } else {
            eprintln!("iotop-bpf: {}", crate::names::show(&note.line()));
        }
    }
    damaged.map_or(Ok(()), |line| Err(anyhow::anyhow!(line)))
}

/// At the end of a run: what the recording did not keep (why it stopped, what it left out).
pub fn say_recorded(recording: Option<&crate::recording::Watch>) {
    if let Some(line) = recording.and_then(crate::recording::Watch::exit_line) {
        eprintln!("iotop-bpf: {}", crate::names::show(&line));
    }
}
