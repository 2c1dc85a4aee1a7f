//! `iotop-bpf attach`: the live view of a running tool's intervals, from another terminal,
//! without privileges. The same [`App`], screen and loop as the tool's own view
//! ([`pipeline::drive`], with [`app::Viewer`]), with its own sort, selection, filter, pause
//! and step-back; only the source differs: the intervals come over the viewers' socket
//! ([`crate::viewers`]).
//!
//! The first connection is made before the terminal is taken, so a refusal (permissions, a
//! token, another version) prints plainly. After that, when the tool goes away the screen
//! keeps the last interval and says so, and the viewer connects again every
//! [`RETRY`]; a tool that came back as another run starts a fresh history.

use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio::sync::mpsc;

use super::app::{self, App, Fed};
use crate::{
    model::Snapshot,
    pipeline::{self, Driven, RunInfo, Step},
    view::{Link, UiState},
    viewers::{
        client::{self, Connection, Target},
        wire::Welcome,
    },
};

/// How often a viewer that lost its tool tries again.
pub const RETRY: Duration = Duration::from_secs(1);
/// Intervals read from the socket ahead of the screen: a screen slower than this leaves the
/// socket unread, and the tool drops frames for it (counted) rather than wait.
const AHEAD: usize = 2;

/// Where `iotop-bpf attach` attaches.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The tool's socket (a path) or TCP address (HOST:PORT); `None`: the one running tool's
    /// socket, looked for.
    pub target: Option<String>,
    /// The token of a TCP address.
    pub token: Option<String>,
}

pub fn run(args: &Options) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async {
        let target = Target::parse(args.target.as_deref())?;
        // A socket found rather than named is looked for again at each try: a restarted
        // tool publishes under its new pid.
        let discovered = args.target.is_none();
        let token = args.token.clone();
        if matches!(target, Target::Tcp(_)) && token.is_none() {
            anyhow::bail!(
                "attaching over TCP needs the token the tool printed: set \
                 IOTOP_BPF_VIEWERS_TOKEN (or --token)"
            );
        }
        let connection = client::connect(&target, token.as_deref()).await?;
        let welcome = connection.welcome.clone();
        let mut ui = UiState {
            host: welcome.run.host.clone(),
            kernel: welcome.run.kernel.clone(),
            started_unix_ms: welcome.run.started_unix_ms,
            notes: welcome.notes.clone(),
            link: Some(Link::Attached { lost: 0 }),
            ..UiState::default()
        };
        ui.message = Some(format!(
            "attached to {} (pid {}, {}) at {target}",
            welcome.tool, welcome.pid, welcome.front_end
        ));
        let (tx, rx) = mpsc::channel(AHEAD);
        let again = Again {
            target,
            discovered,
            token,
        };
        tokio::spawn(keep_linked(again, connection, tx));
        let mut viewer = app::Viewer::enter(App::new(ui))?;
        pipeline::drive(&mut LinkFeed::new(&welcome, rx), &mut viewer).await
    })
}

/// What the link's task tells the view.
#[derive(Debug)]
enum Event {
    /// An interval, and the frames the tool dropped for this connection so far.
    Interval {
        dropped: u64,
        snapshot: Box<Snapshot>,
    },
    /// The connection is gone, or the tool cannot be reached (why).
    Lost(String),
    /// Connected again.
    Back(Box<Welcome>),
}

/// How to connect again.
struct Again {
    target: Target,
    /// Found in the default places, not named: found again at each try.
    discovered: bool,
    token: Option<String>,
}

impl Again {
    async fn connect(&self) -> Result<Connection> {
        let found;
        let target = if self.discovered {
            found = Target::Unix(client::discover()?);
            &found
        } else {
            &self.target
        };
        client::connect(target, self.token.as_deref()).await
    }
}

/// Reads the tool's intervals, and connects again whenever the connection is lost, until
/// the view is gone. Connection reads are not cancel-safe, so they happen here, in a task of
/// their own; the view waits on the channel, which is.
async fn keep_linked(again: Again, first: Connection, tx: mpsc::Sender<Event>) {
    let mut connection = Some(first);
    let mut said = String::new();
    loop {
        if let Some(mut link) = connection.take() {
            let why = loop {
                match link.next().await {
                    Ok((dropped, interval)) => {
                        let event = Event::Interval {
                            dropped,
                            snapshot: Box::new(interval.snapshot),
                        };
                        if tx.send(event).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => break format!("{e:#}"),
                }
            };
            said.clone_from(&why);
            if tx.send(Event::Lost(why)).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(RETRY).await;
        match again.connect().await {
            Ok(link) => {
                said.clear();
                if tx
                    .send(Event::Back(Box::new(link.welcome.clone())))
                    .await
                    .is_err()
                {
                    return;
                }
                connection = Some(link);
            }
            // Said once while it does not change (the screen is redrawn for each event).
            Err(e) => {
                let why = format!("{e:#}");
                if why != said {
                    said.clone_from(&why);
                    if tx.send(Event::Lost(why)).await.is_err() {
                        return;
                    }
                }
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

/// The link's events as the live view's feed: the frames lost are counted across
/// reconnections to the same run.
struct LinkFeed {
    events: mpsc::Receiver<Event>,
    /// The run shown: the tool's pid and its run.
    run: (u32, RunInfo),
    /// Frames lost by the connections before this one (to the same run).
    lost_before: u64,
    lost: u64,
    /// What to give next, before reading on.
    pending: Option<Fed>,
}

impl LinkFeed {
    fn new(welcome: &Welcome, events: mpsc::Receiver<Event>) -> Self {
        Self {
            events,
            run: (welcome.pid, welcome.run.clone()),
            lost_before: 0,
            lost: 0,
            pending: None,
        }
    }

    fn take(&mut self, event: Event) -> Fed {
        match event {
            Event::Interval { dropped, snapshot } => {
                let lost = self.lost_before + dropped;
                if lost == self.lost {
                    return Fed::Interval(snapshot);
                }
                self.lost = lost;
                self.pending = Some(Fed::Interval(snapshot));
                Fed::Link(Link::Attached { lost })
            }
            Event::Lost(why) => {
                self.lost_before = self.lost;
                Fed::Link(Link::Lost { why })
            }
            Event::Back(welcome) => {
                let run = (welcome.pid, welcome.run.clone());
                let fresh = run != self.run;
                if fresh {
                    self.run = run;
                    self.lost_before = 0;
                    self.lost = 0;
                }
                self.pending = Some(Fed::Link(Link::Attached { lost: self.lost }));
                Fed::Run {
                    info: welcome.run,
                    notes: welcome.notes,
                    fresh,
                }
            }
        }
    }
}

impl LinkFeed {
    /// What the view is given next: what is pending, else the next event; `None` when the
    /// link's task is gone (only when the view is). Cancel-safe: the channel is.
    async fn fed(&mut self) -> Option<Fed> {
        if let Some(fed) = self.pending.take() {
            return Some(fed);
        }
        let event = self.events.recv().await?;
        Some(self.take(event))
    }
}

impl Driven for LinkFeed {
    type Aside = Fed;

    async fn next(&mut self) -> Result<Step<Fed>> {
        Ok(match self.fed().await {
            Some(Fed::Interval(snap)) => Step::Interval(snap),
            Some(fed) => Step::Aside(fed),
            None => Step::End,
        })
    }
}

#[cfg(test)]
mod tests;
