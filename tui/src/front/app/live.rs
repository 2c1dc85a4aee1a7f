//! The live view as a front end of the one loop (`pipeline::drive`): over a pipeline
//! ([`LiveFront`]: the probes, a recording, the demo) and over an attached viewer's link
//! ([`Viewer`]), both through one [`Screen`].

use anyhow::{Context as _, Result};
use crossterm::event::EventStream;
use futures::StreamExt as _;

use super::{App, Flow};
use crate::{
    history::History,
    model::Snapshot,
    names::{self, show},
    pipeline::{self, Front, Pipeline, RunInfo},
    recording::{Note, Watch},
    shutdown::Shutdown,
    term::TerminalGuard,
    view::{Link, Rec, UiState},
};

/// What the live view is asked to do (from the command line, or the demo's own).
#[derive(Clone, Debug, Default)]
pub struct ViewOptions {
    /// `-p`: the processes the filter starts with.
    pub pids: Vec<u32>,
    /// The recording replayed, if it is one (`--replay`).
    pub replay: Option<std::path::PathBuf>,
    /// `-n`: intervals to show before quitting.
    pub iterations: Option<u64>,
}

/// The view's starting state: `-p PID` becomes the filter.
/// The host and kernel come from a recording's header when replaying: shown as any name.
fn initial_ui(options: &ViewOptions, info: &RunInfo, notes: Vec<String>) -> UiState {
    UiState {
        host: show(&info.host).into_owned(),
        kernel: show(&info.kernel).into_owned(),
        started_unix_ms: info.started_unix_ms,
        notes: notes.iter().map(|n| show(n).into_owned()).collect(),
        filter: options
            .pids
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        ..UiState::default()
    }
}

/// The live view over a pipeline (the probes, or a recording replayed at its recorded pace
/// times `--speed`, where pause stops the clock). `starting`: the screen taken before the
/// probes were loaded (see [`Starting`]); without it the terminal is taken here. `startup`: a
/// message for the key line until the first key (where viewers attach).
pub async fn run(
    options: &ViewOptions,
    pipeline: Pipeline,
    starting: Option<Starting>,
    startup: Option<String>,
) -> Result<()> {
    run_captioned(options, pipeline, starting, None, startup).await
}

/// How often captions are looked for (the demo changes them every few seconds at most).
const CAPTION_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// [`run`], with captions (the demo's) shown on the key line as they arrive.
pub async fn run_captioned(
    options: &ViewOptions,
    mut pipeline: Pipeline,
    starting: Option<Starting>,
    captions: Option<std::sync::mpsc::Receiver<String>>,
    startup: Option<String>,
) -> Result<()> {
    let mut notes = pipeline.notes();
    if let Some(path) = &options.replay {
        notes.insert(0, format!("replaying {}", names::path(path)));
    }
    let mut ui = initial_ui(options, pipeline.info(), notes);
    ui.message = startup;
    ui.recording = pipeline.recording().map(|_| Rec::On { dropped: 0 });
    let app = App::new(ui);
    let screen = match starting {
        Some(Starting(mut screen)) => {
            screen.app = app;
            screen.app.draw(screen.guard.terminal())?;
            screen
        }
        None => Screen::enter(app)?,
    };
    let mut front = LiveFront {
        recording: pipeline.recording(),
        screen,
        captions,
        caption_poll: tokio::time::interval(CAPTION_POLL),
        replay: options.replay.clone(),
        limit: options.iterations,
        intervals: 0,
    };
    pipeline::drive(&mut pipeline, &mut front).await?;
    let intervals = front.intervals;
    drop(front);
    super::super::replay_ended(&pipeline, intervals)
}

/// What the key line says while the probes load.
const STARTING: &str = "starting: loading the probes (the kernel verifies each)";

/// The live view's screen, taken before the probes are loaded: the verifier takes ~0.5 s over
/// them on a busy host, and a tool opened in an incident should answer at once. Its frame is
/// empty, with [`STARTING`] on the key line, until [`run`] takes it over. Dropped (the probes
/// could not be loaded), it gives the terminal back, so the reason prints plainly.
pub struct Starting(Screen);

impl Starting {
    /// Takes the terminal and draws the empty frame: `host` and `kernel` in the header, the
    /// interval `every`. Keys and signals wait until the probes are loaded.
    pub fn enter(
        options: &ViewOptions,
        host: String,
        kernel: String,
        every: std::time::Duration,
    ) -> Result<Self> {
        let info = RunInfo {
            host,
            kernel,
            started_ns: 0,
            started_unix_ms: crate::clock::unix_ms_now(),
            interval_ns: u64::try_from(every.as_nanos()).unwrap_or(u64::MAX),
        };
        let mut ui = initial_ui(options, &info, Vec::new());
        ui.message = Some(STARTING.to_string());
        ui.probes_loading = true;
        let mut app = App::new(ui);
        app.shown.interval_ns = info.interval_ns;
        Ok(Self(Screen::enter(app)?))
    }
}

/// What the live view is fed, besides keys.
pub enum Fed {
    /// An interval closed.
    Interval(Box<Snapshot>),
    /// The demo's caption for its next step: the findings board starts clear.
    Caption(String),
    /// No interval will come any more (the end of a recording): said on the key line.
    Ended(String),
    /// The tool a viewer is attached to (again): its header and notes. `fresh`: another
    /// run than before (another tool, or restarted), whose intervals start a new history.
    Run {
        info: RunInfo,
        notes: Vec<String>,
        fresh: bool,
    },
    /// The link of an attached viewer to its tool changed.
    Link(Link),
}

impl App {
    /// Takes in what the feed gave.
    pub fn apply(&mut self, fed: Fed) -> Flow {
        match fed {
            Fed::Interval(snap) => self.update(*snap),
            Fed::Caption(caption) => {
                self.clear_board();
                self.ui.caption = Some(caption);
            }
            Fed::Ended(note) => self.ui.notes = vec![show(&note).into_owned()],
            Fed::Run { info, notes, fresh } => {
                self.ui.host = show(&info.host).into_owned();
                self.ui.kernel = show(&info.kernel).into_owned();
                self.ui.started_unix_ms = info.started_unix_ms;
                self.ui.notes = notes.iter().map(|n| show(n).into_owned()).collect();
                if fresh {
                    // The old run's intervals are not this one's past.
                    self.history = History::default();
                    self.shown = Snapshot::default();
                    self.ui.paused = false;
                    self.ui.back = 0;
                    self.settle();
                }
            }
            Fed::Link(mut link) => {
                if let Link::Lost { why } = &mut link {
                    *why = show(why).into_owned();
                }
                // What the key line said (where it attached) gives way to why it is lost.
                if matches!(link, Link::Lost { .. }) {
                    self.ui.message = None;
                }
                self.ui.link = Some(link);
            }
        }
        Flow::Continue
    }
}

/// The screen of a live view: the terminal taken (and given back on drop), the keys and the
/// signals, and the [`App`] drawn on it.
struct Screen {
    app: App,
    shutdown: Shutdown,
    guard: TerminalGuard,
    input: EventStream,
}

impl Screen {
    /// Takes the terminal and draws the app.
    fn enter(mut app: App) -> Result<Self> {
        let shutdown = Shutdown::install().context("install signal handlers")?;
        let mut guard = TerminalGuard::enter()?;
        app.draw(guard.terminal())?;
        Ok(Self {
            app,
            shutdown,
            guard,
            input: EventStream::new(),
        })
    }

    /// Waits for a signal (quit) or a key, which it answers and redraws. Cancel-safe.
    async fn keys(&mut self) -> Result<Flow> {
        tokio::select! {
            biased;
            () = self.shutdown.recv() => Ok(Flow::Stop),
            event = self.input.next() => match event {
                Some(Ok(event)) => {
                    if self.app.on_event(&event) == Flow::Stop {
                        return Ok(Flow::Stop);
                    }
                    self.app.draw(self.guard.terminal())?;
                    Ok(Flow::Continue)
                }
                Some(Err(e)) => Err(e).context("read the terminal"),
                None => Ok(Flow::Stop),
            },
        }
    }

    /// Takes in what the feed gave and redraws.
    fn take(&mut self, fed: Fed) -> Result<Flow> {
        if self.app.apply(fed) == Flow::Stop {
            return Ok(Flow::Stop);
        }
        self.app.draw(self.guard.terminal())?;
        Ok(Flow::Continue)
    }
}

/// The live view of an attached viewer: the screen, over a link's intervals and asides
/// (the run shown, the link's state). The link never ends while the view is there; its task
/// gone, the view ends.
pub struct Viewer {
    screen: Screen,
}

impl Viewer {
    /// Takes the terminal and draws `app`.
    pub fn enter(app: App) -> Result<Self> {
        Ok(Self {
            screen: Screen::enter(app)?,
        })
    }
}

impl Front<Fed> for Viewer {
    async fn other(&mut self) -> Result<Flow> {
        self.screen.keys().await
    }

    fn interval(&mut self, snap: Box<Snapshot>) -> Result<Flow> {
        self.screen.take(Fed::Interval(snap))
    }

    fn aside(&mut self, fed: Fed) -> Result<Flow> {
        self.screen.take(fed)
    }

    fn held(&self) -> bool {
        self.screen.app.ui.paused
    }
}

/// The live view as a [`Pipeline`]'s front end (the probes, a recording, the demo), with the
/// demo's captions.
struct LiveFront {
    /// The recording's state (`--record`), for the status line.
    recording: Option<Watch>,
    screen: Screen,
    captions: Option<std::sync::mpsc::Receiver<String>>,
    caption_poll: tokio::time::Interval,
    /// The recording replayed, if it is one.
    replay: Option<std::path::PathBuf>,
    /// `-n`: intervals to show before quitting.
    limit: Option<u64>,
    intervals: u64,
}

impl LiveFront {
    /// The recording's state, to the status line (drawn with the next frame).
    fn recorded(&mut self) {
        if let Some(watch) = &self.recording {
            self.screen.app.ui.recording = Some(match watch.stopped() {
                Some(stopped) => Rec::Stopped(show(&stopped).into_owned()),
                None => Rec::On {
                    dropped: watch.state().dropped,
                },
            });
        }
    }
}

impl Front for LiveFront {
    async fn other(&mut self) -> Result<Flow> {
        loop {
            tokio::select! {
                biased;
                keys = self.screen.keys() => return keys,
                _ = self.caption_poll.tick(), if self.captions.is_some() => {
                    let latest = self.captions.as_ref().and_then(|rx| rx.try_iter().last());
                    if let Some(caption) = latest {
                        return self.screen.take(Fed::Caption(caption));
                    }
                }
            }
        }
    }

    fn interval(&mut self, snap: Box<Snapshot>) -> Result<Flow> {
        self.intervals += 1;
        self.recorded();
        if self.screen.take(Fed::Interval(snap))? == Flow::Stop
            || self.limit.is_some_and(|n| self.intervals >= n)
        {
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    }

    fn ended(&mut self, notes: &[Note]) -> Result<Flow> {
        // Where the recording was cut short or damaged, rather than its end.
        let note = match (notes.iter().rev().find(|n| n.ends_early()), &self.replay) {
            (Some(note), _) => format!("{} (q quits)", note.line()),
            (None, Some(path)) => format!("end of the recording {} (q quits)", names::path(path)),
            (None, None) => "no more intervals (q quits)".to_string(),
        };
        // The view stays until q.
        self.screen.take(Fed::Ended(note))
    }

    fn held(&self) -> bool {
        self.screen.app.ui.paused
    }
}
