//! The default command: the intervals of the live probes or of a recording (`--replay`),
//! shown in the live view or printed by `--batch` and `--json`; with `--listen`, served to
//! Prometheus too, and with the live view, published for `iotop-bpf attach`.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use iotop_bpf_probe::privilege;

use super::{app, batch};
use crate::pipeline::Pipeline;

/// What the default command is given.
pub struct Options {
    /// `--listen`: serve the metrics too.
    pub listen: Option<SocketAddr>,
    pub viewers: crate::viewers::endpoint::Options,
    /// Whether any `--viewers-*` option was given (they are refused with `--batch`).
    pub viewers_given: bool,
    /// `--batch` or `--json`: printed, no screen.
    pub batch: bool,
    /// The recording's parts to replay; empty: the live probes.
    pub replay: Vec<PathBuf>,
    pub speed: f64,
    pub delay: Duration,
    pub iterations: Option<u64>,
    pub record: Option<crate::recording::Options>,
    pub top: usize,
    pub view: app::ViewOptions,
    pub print: batch::PrintOptions,
}

pub fn run(opts: &Options) -> Result<()> {
    // A bad or busy address fails before anything is loaded.
    let listener = opts.listen.map(crate::export::server::bind).transpose()?;
    // Headless reports publish nothing for viewers: they have no one to share a screen with.
    if opts.batch && opts.viewers_given {
        anyhow::bail!(
            "the --viewers-* options are for the live view and serve, not --batch or --json"
        );
    }
    let viewers = (!opts.batch)
        .then(|| crate::viewers::endpoint::bind(&opts.viewers))
        .transpose()?;
    // Replay needs no privileges; the live probes are checked before anything else.
    let env = if opts.replay.is_empty() {
        Some(privilege::check()?)
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async {
        // The live view's screen first, the probes then (see `app::Starting`). If they cannot
        // be loaded, it is dropped, and the terminal given back, before the reason is printed.
        let starting = match (&env, opts.batch) {
            (Some(env), false) => Some(app::Starting::enter(
                &opts.view,
                crate::pipeline::host_name(),
                env.kernel_release.clone(),
                opts.delay,
            )?),
            _ => None,
        };
        let mut pipeline = match &env {
            None => Pipeline::replay(&opts.replay, (!opts.batch).then_some(opts.speed))?,
            Some(env) => Pipeline::live(env, opts.delay, opts.iterations, opts.record.as_ref())?,
        };
        // Said at the end, once the terminal is back: what the recording did not keep.
        let recording = pipeline.recording();
        if let Some(listener) = listener {
            let addr = crate::export::attach(&mut pipeline, listener, opts.top)?;
            if opts.batch {
                eprintln!("iotop-bpf: serving metrics on http://{addr}/metrics");
            }
        }
        if opts.batch {
            let result = batch::run(&opts.print, pipeline, &mut std::io::stdout().lock()).await;
            super::say_recorded(recording.as_ref());
            return result;
        }
        // Kept to the end: dropping it removes the socket.
        let published = viewers
            .map(|bound| crate::viewers::publish::publish(&mut pipeline, bound, "the live view"))
            .transpose()?;
        // `attach` finds the socket on its own; a TCP token, or why nothing is published,
        // is said on the key line, and after the view on the terminal (the screen is up).
        let lines: Vec<String> = published
            .as_ref()
            .map(|p| p.tcp_line().into_iter().chain(p.note.clone()).collect())
            .unwrap_or_default();
        let startup = (!lines.is_empty()).then(|| lines.join("; "));
        let result = app::run(&opts.view, pipeline, starting, startup).await;
        for line in &lines {
            eprintln!("iotop-bpf: {}", crate::names::show(line));
        }
        super::say_recorded(recording.as_ref());
        drop(published);
        result
    })
}
