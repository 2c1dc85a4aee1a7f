//! The Prometheus exporter: the snapshot of each closed interval is folded into exporter
//! state ([`metrics::Exporter`]) that an HTTP server ([`server`]) encodes on each scrape.
//!
//! It hangs off the [`Pipeline`] as a tap, so it sees the same snapshots as the live view
//! and the reports (and works in `serve`, beside the live view, beside `--batch`/`--json`,
//! and on a replay alike), and a scrape never reads the kernel.

pub mod classic;
pub mod metrics;
pub mod server;
pub mod workloads;

use std::net::{SocketAddr, TcpListener};

use anyhow::Result;

pub use self::metrics::{Exporter, Shared};
use crate::pipeline::Pipeline;

/// Serves metrics of `pipeline`'s intervals on `listener` (bound beforehand with
/// [`server::bind`]) from now on; `top` workloads get series of their own. Must run inside
/// the tokio runtime. Returns the address served.
pub fn attach(pipeline: &mut Pipeline, listener: TcpListener, top: usize) -> Result<SocketAddr> {
    let shared = Shared::new(Exporter::new(top));
    let addr = server::spawn(listener, shared.registry())?;
    let recording = pipeline.recording();
    pipeline.tap(move |snap| {
        shared.update(snap);
        if let Some(watch) = &recording {
            let state = watch.state();
            shared.recorded(metrics::Recorded {
                up: state.stopped.is_none(),
                written_bytes: state.written,
                dropped_events: state.dropped,
            });
        }
    });
    Ok(addr)
}
