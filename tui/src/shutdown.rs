//! SIGINT, SIGTERM and SIGHUP as one "stop" event for the event loops.

use tokio::signal::unix::{Signal, SignalKind, signal};

pub struct Shutdown {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Shutdown {
    /// Installs the handlers; from now on these signals no longer kill the process outright,
    /// so the loops can restore the terminal and detach the probes first.
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Resolves when one of the signals arrives. Cancel-safe.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
        }
    }
}
