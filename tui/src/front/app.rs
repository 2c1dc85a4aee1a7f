//! The live view's state machine (keys -> `view::UiState`) and its event loop.

use anyhow::{Context as _, Result};
use crossterm::event::{Event, EventStream, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use futures::StreamExt as _;
use ratatui::{
    Terminal,
    backend::{Backend, TestBackend},
};

use super::capture;
use crate::{
    history::History,
    model::Snapshot,
    pipeline::{self, Front, Pipeline, RunInfo},
    shutdown::Shutdown,
    term::TerminalGuard,
    view::{self, Focus, Link, Theme, UiState, finding, findings, procs},
};

/// Whether the loop goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Quit,
}

/// What the live view shows and how.
pub struct App {
    pub ui: UiState,
    pub theme: Theme,
    /// The snapshot on screen (frozen while paused; a past one while stepping back).
    pub shown: Snapshot,
    /// The intervals before (sparklines, heat maps, stepping back); recorded while paused.
    pub history: History,
    /// The terminal's size at the last draw: the size of a screen capture.
    pub size: (u16, u16),
    /// Where `w` writes (the current directory when `None`).
    pub capture_dir: Option<std::path::PathBuf>,
    /// The end (`CLOCK_MONOTONIC` ns) of the last interval before the demo's current step:
    /// findings of earlier steps are not shown, so each step starts with a clear board.
    board_since_ns: Option<u64>,
}

impl App {
    pub fn new(ui: UiState) -> Self {
        Self {
            ui,
            theme: Theme::default(),
            shown: Snapshot::default(),
            history: History::default(),
            size: (80, 24),
            capture_dir: None,
            board_since_ns: None,
        }
    }

    /// A demo step began: findings from before it leave the screen (the model still
    /// keeps them; reports and history are not touched).
    pub fn clear_board(&mut self) {
        let newest = self
            .history
            .snapshot_back(0)
            .map_or(self.shown.now_ns, |(s, _)| s.now_ns);
        self.board_since_ns = Some(newest.max(self.shown.now_ns));
    }

    /// A new interval closed: recorded, and shown unless paused.
    pub fn update(&mut self, mut snap: Snapshot) {
        self.history.push(&snap, self.ui.selected_pid);
        if let Some(since) = self.board_since_ns {
            // A finding of the step before is shown again only if it goes on two intervals
            // into this one (the interval that straddles the change is not evidence).
            let settled = since + 2 * snap.interval_ns.max(1);
            snap.findings
                .retain(|f| f.first_seen_ns > since || f.last_seen_ns >= settled);
        }
        if self.ui.paused {
            self.ui.back = self.back_of(self.shown.seq);
        } else {
            self.shown = snap;
            self.ui.back = 0;
            self.settle();
        }
    }

    /// Keeps the findings' focus and overlay true to the snapshot on screen: a finding that
    /// is no longer listed closes its text (and says why), and the focus leaves a findings
    /// pane that is gone.
    fn settle(&mut self) {
        let groups = findings::groups(&self.shown);
        if self.ui.show_finding && findings::selected(&groups, &self.ui).is_none() {
            self.ui.show_finding = false;
            self.ui.scroll = 0;
            self.ui.message = Some(format!(
                "the finding is no longer listed ({} s after it was last seen)",
                crate::model::findings::FADE_NS / 1_000_000_000
            ));
        }
        if self.ui.focus == Focus::Findings && groups.is_empty() {
            self.ui.focus = Focus::Processes;
        }
        // The process table keeps its order from the interval before, unless a row overtook.
        self.ui.order = procs::advance_order(&self.shown, &self.ui);
    }

    /// Intervals between `seq` and the newest recorded (0 before the first interval).
    fn back_of(&self, seq: u64) -> u64 {
        if seq == 0 {
            return 0;
        }
        self.history
            .frames()
            .back()
            .map_or(0, |f| f.seq.saturating_sub(seq))
    }

    /// Pauses and shows the kept interval `delta` intervals away from the one on screen
    /// (stops at the oldest and the newest kept).
    fn step(&mut self, delta: i64) {
        self.ui.paused = true;
        let target = self.shown.seq.saturating_add_signed(delta);
        let found = if delta < 0 {
            // The nearest kept interval at or before the target (never past the oldest).
            (1..=target)
                .rev()
                .take(crate::history::FRAMES)
                .find_map(|seq| self.history.snapshot(seq))
                .or_else(|| self.history.snapshot_back(usize::MAX).map(|(s, _)| s))
        } else {
            self.history.snapshot(target)
        };
        if let Some(snap) = found
            && snap.seq != self.shown.seq
        {
            self.shown = snap.clone();
            self.settle();
        }
        self.ui.back = self.back_of(self.shown.seq);
    }

    /// Leaves the pause on the newest interval kept.
    fn resume(&mut self) {
        self.ui.paused = false;
        if self.ui.back > 0
            && let Some((newest, _)) = self.history.snapshot_back(0)
        {
            self.shown = newest.clone();
            self.settle();
        }
        self.ui.back = 0;
    }

    /// Writes the screen as it is now (text and Markdown) and says where on the key line.
    fn capture(&mut self) {
        let (width, height) = self.size;
        let mut terminal = match Terminal::new(TestBackend::new(width, height)) {
            Ok(terminal) => terminal,
            Err(e) => {
                self.ui.message = Some(format!("could not capture the screen: {e}"));
                return;
            }
        };
        if let Err(e) = self.draw(&mut terminal) {
            self.ui.message = Some(format!("could not capture the screen: {e:#}"));
            return;
        }
        let text = capture::screen_text(terminal.backend().buffer());
        let at = self.ui.started_unix_ms + self.shown.elapsed_ns / 1_000_000;
        let md = capture::markdown(&text, &self.shown, &self.ui.host, at);
        let now = crate::clock::unix_ms_now();
        self.ui.message = Some(
            match capture::write(self.capture_dir.as_deref(), &self.ui.host, now, &text, &md) {
                Ok(path) => format!("saved {} (and .md)", path.display()),
                Err(e) => format!("could not save the screen: {e:#}"),
            },
        );
    }

    pub fn on_event(&mut self, event: &Event) -> Flow {
        match event {
            Event::Key(key) if key.kind != KeyEventKind::Release => self.on_key(*key),
            _ => Flow::Continue, // resize and others: the caller redraws
        }
    }

    pub fn on_key(&mut self, key: KeyEvent) -> Flow {
        let ui = &mut self.ui;
        if key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL) {
            return Flow::Quit;
        }
        ui.message = None;
        if ui.editing_filter {
            match key.code {
                KeyCode::Enter => ui.editing_filter = false,
                KeyCode::Esc => {
                    ui.filter.clear();
                    ui.editing_filter = false;
                }
                KeyCode::Backspace => {
                    ui.filter.pop();
                }
                KeyCode::Char(c) if !c.is_control() && ui.filter.len() < 32 => ui.filter.push(c),
                _ => {}
            }
            return Flow::Continue;
        }
        if ui.show_help {
            // Any key closes the help; q still quits.
            ui.show_help = false;
            return if key.code == KeyCode::Char('q') {
                Flow::Quit
            } else {
                Flow::Continue
            };
        }
        if ui.show_finding {
            // Its text scrolls with the keys that move a selection; other keys act as usual.
            let max = finding::max_scroll(&self.shown, ui, self.size);
            match key.code {
                KeyCode::Esc | KeyCode::Enter | KeyCode::Backspace => {
                    ui.show_finding = false;
                    ui.scroll = 0;
                    return Flow::Continue;
                }
                KeyCode::Down | KeyCode::Char('j') => {
                    ui.scroll = ui.scroll.saturating_add(1).min(max)
                }
                KeyCode::Up | KeyCode::Char('k') => ui.scroll = ui.scroll.saturating_sub(1),
                KeyCode::PageDown => ui.scroll = ui.scroll.saturating_add(10).min(max),
                KeyCode::PageUp => ui.scroll = ui.scroll.saturating_sub(10),
                _ => return self.on_key_below(key),
            }
            return Flow::Continue;
        }
        if ui.show_detail && matches!(key.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Backspace)
        {
            ui.show_detail = false;
            return Flow::Continue;
        }
        self.on_key_below(key)
    }

    /// The keys of the screen itself, under any overlay.
    fn on_key_below(&mut self, key: KeyEvent) -> Flow {
        let ui = &mut self.ui;
        match key.code {
            KeyCode::Char('q') => return Flow::Quit,
            KeyCode::Char(' ' | 'p') if ui.paused => self.resume(),
            KeyCode::Char(' ' | 'p') => ui.paused = true,
            KeyCode::Char('[') | KeyCode::Left => self.step(-1),
            KeyCode::Char(']') | KeyCode::Right => self.step(1),
            KeyCode::Char('H') => ui.show_heatmap = !ui.show_heatmap,
            KeyCode::Char('l') => {
                ui.heat_kind = ui.heat_kind.next();
                ui.show_heatmap = true;
            }
            KeyCode::Char('w') => self.capture(),
            KeyCode::Tab => self.cycle_focus(true),
            KeyCode::BackTab => self.cycle_focus(false),
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::Home | KeyCode::Char('g') => self.move_selection(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(isize::MAX / 2),
            // Only the columns on screen: sorting by one the screen cannot show would order
            // the rows by something nobody sees.
            KeyCode::Char('s' | '>') => {
                ui.sort = ui
                    .sort
                    .cycle(&procs::sort_keys(self.size.0, ui.by_cgroup), true);
                ui.reversed = false;
            }
            KeyCode::Char('<') => {
                ui.sort = ui
                    .sort
                    .cycle(&procs::sort_keys(self.size.0, ui.by_cgroup), false);
                ui.reversed = false;
            }
            KeyCode::Char('x') => ui.expand_workers = !ui.expand_workers,
            KeyCode::Char('r') => ui.reversed = !ui.reversed,
            KeyCode::Char('/') => ui.editing_filter = true,
            KeyCode::Char('c') => ui.cumulative = !ui.cumulative,
            KeyCode::Char('C') => {
                ui.by_cgroup = !ui.by_cgroup;
                // A cgroup row is no process: nothing to drill into.
                ui.show_detail = false;
            }
            KeyCode::Char('?' | 'h') | KeyCode::F(1) => ui.show_help = true,
            KeyCode::Enter if ui.focus == Focus::Findings => {
                if findings::selected(&findings::groups(&self.shown), ui).is_none() {
                    self.move_selection(1);
                }
                self.ui.show_finding = self.ui.selected_finding.is_some();
                self.ui.show_detail = false;
                self.ui.scroll = 0;
            }
            KeyCode::Enter if ui.focus == Focus::Processes => {
                if ui.selected_pid.is_none() {
                    self.move_selection(1);
                }
                self.ui.show_detail = self.ui.selected_pid.is_some();
            }
            KeyCode::Esc => {
                ui.filter.clear();
                ui.selected_pid = None;
                ui.selected_disk = None;
                ui.selected_finding = None;
            }
            _ => {}
        }
        Flow::Continue
    }

    /// Tab and Shift-Tab: processes, findings, disks, round. The findings pane is passed over
    /// while it is not on screen; entering it selects its first line, so the keys act on
    /// something visible at once.
    fn cycle_focus(&mut self, forward: bool) {
        let order = if forward {
            [Focus::Processes, Focus::Findings, Focus::Disks]
        } else {
            [Focus::Processes, Focus::Disks, Focus::Findings]
        };
        let groups = findings::groups(&self.shown);
        let at = order.iter().position(|&f| f == self.ui.focus).unwrap_or(0);
        let mut next = order[(at + 1) % order.len()];
        if next == Focus::Findings && groups.is_empty() {
            next = order[(at + 2) % order.len()];
        }
        self.ui.focus = next;
        if next == Focus::Findings && findings::selected(&groups, &self.ui).is_none() {
            self.ui.selected_finding = Some(groups[0].key.clone());
        }
    }

    /// Moves the selection in the focused pane by `delta` rows (clamped), keeping it by
    /// identity (pid or device) rather than by position.
    fn move_selection(&mut self, delta: isize) {
        let step = |current: Option<usize>, len: usize| -> Option<usize> {
            if len == 0 {
                return None;
            }
            let last = isize::try_from(len - 1).unwrap_or(isize::MAX);
            let from = current.map_or(if delta > 0 { -1 } else { last + 1 }, |i| {
                isize::try_from(i).unwrap_or(0)
            });
            usize::try_from(from.saturating_add(delta).clamp(0, last)).ok()
        };
        match self.ui.focus {
            Focus::Processes => {
                // The processes in the table's order (a folded or cgroup row is no process).
                let pids: Vec<u32> = if self.ui.by_cgroup {
                    procs::visible(&self.shown, &self.ui)
                        .iter()
                        .map(|p| p.tgid)
                        .collect()
                } else {
                    procs::entries(&self.shown, &self.ui)
                        .iter()
                        .filter_map(|e| e.pid(&self.ui))
                        .collect()
                };
                let current = self
                    .ui
                    .selected_pid
                    .and_then(|pid| pids.iter().position(|&p| p == pid));
                self.ui.selected_pid = step(current, pids.len()).map(|i| pids[i]);
            }
            Focus::Findings => {
                let groups = findings::groups(&self.shown);
                let current = findings::selected(&groups, &self.ui);
                self.ui.selected_finding =
                    step(current, groups.len()).map(|i| groups[i].key.clone());
            }
            Focus::Disks => {
                let rows = view::disks_in_view(&self.shown, &self.ui, self.size.1).rows;
                let current = self
                    .ui
                    .selected_disk
                    .and_then(|dev| rows.iter().position(|d| d.dev == dev));
                self.ui.selected_disk = step(current, rows.len()).map(|i| rows[i].dev);
            }
        }
    }

    pub fn draw(&mut self, terminal: &mut Terminal<impl Backend>) -> Result<()> {
        let completed = terminal
            .draw(|frame| {
                view::render(frame, &self.shown, &self.history, &self.ui, &self.theme);
            })
            .map_err(|e| anyhow::anyhow!("draw the screen: {e}"))?;
        self.size = (completed.area.width, completed.area.height);
        Ok(())
    }
}

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
fn initial_ui(options: &ViewOptions, info: &RunInfo, notes: Vec<String>) -> UiState {
    UiState {
        host: info.host.clone(),
        kernel: info.kernel.clone(),
        started_unix_ms: info.started_unix_ms,
        notes,
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
/// times `--speed`, where pause stops the clock). The pipeline is started before the
/// terminal is taken, so a failure to load the probes prints plainly. `startup`: a message
/// for the key line until the first key (where viewers attach).
pub async fn run(options: &ViewOptions, pipeline: Pipeline, startup: Option<String>) -> Result<()> {
    run_captioned(options, pipeline, None, startup).await
}

/// How often captions are looked for (the demo changes them every few seconds at most).
const CAPTION_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// [`run`], with captions (the demo's) shown on the key line as they arrive.
pub async fn run_captioned(
    options: &ViewOptions,
    mut pipeline: Pipeline,
    captions: Option<std::sync::mpsc::Receiver<String>>,
    startup: Option<String>,
) -> Result<()> {
    let mut notes = pipeline.notes();
    if let Some(path) = &options.replay {
        notes.insert(0, format!("replaying {}", path.display()));
    }
    let mut ui = initial_ui(options, pipeline.info(), notes);
    ui.message = startup;
    let mut front = LiveFront {
        screen: Screen::enter(App::new(ui))?,
        captions,
        caption_poll: tokio::time::interval(CAPTION_POLL),
        replay: options.replay.clone(),
        limit: options.iterations,
        intervals: 0,
    };
    pipeline::drive(&mut pipeline, &mut front).await
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
    /// Stop (`-n` intervals shown).
    Quit,
}

/// Where the live view's intervals come from: a [`Pipeline`] (the probes, a recording, the
/// demo) or a running tool's published intervals (`attach`).
pub trait Feed {
    /// Waits for what comes next. Cancel-safe: the loop waits for keys and signals beside it.
    fn next(&mut self) -> impl Future<Output = Result<Fed>>;
    /// The view was paused or resumed (a paced replay stops its clock while paused).
    fn hold(&mut self, _paused: bool) {}
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
            Fed::Ended(note) => self.ui.notes = vec![note],
            Fed::Run { info, notes, fresh } => {
                self.ui.host = info.host;
                self.ui.kernel = info.kernel;
                self.ui.started_unix_ms = info.started_unix_ms;
                self.ui.notes = notes;
                if fresh {
                    // The old run's intervals are not this one's past.
                    self.history = History::default();
                    self.shown = Snapshot::default();
                    self.ui.paused = false;
                    self.ui.back = 0;
                    self.settle();
                }
            }
            Fed::Link(link) => {
                // What the key line said (where it attached) gives way to why it is lost.
                if matches!(link, Link::Lost { .. }) {
                    self.ui.message = None;
                }
                self.ui.link = Some(link);
            }
            Fed::Quit => return Flow::Quit,
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
            () = self.shutdown.recv() => Ok(Flow::Quit),
            event = self.input.next() => match event {
                Some(Ok(event)) => {
                    if self.app.on_event(&event) == Flow::Quit {
                        return Ok(Flow::Quit);
                    }
                    self.app.draw(self.guard.terminal())?;
                    Ok(Flow::Continue)
                }
                Some(Err(e)) => Err(e).context("read the terminal"),
                None => Ok(Flow::Quit),
            },
        }
    }

    /// Takes in what the feed gave and redraws.
    fn take(&mut self, fed: Fed) -> Result<Flow> {
        if self.app.apply(fed) == Flow::Quit {
            return Ok(Flow::Quit);
        }
        self.app.draw(self.guard.terminal())?;
        Ok(Flow::Continue)
    }
}

/// The live view's loop over a [`Feed`] (an attached viewer's link): takes the terminal,
/// draws, answers keys and signals, and gives the terminal back however it ends. Over a
/// pipeline, the loop is the pipeline's own ([`pipeline::drive`], with [`LiveFront`]).
pub async fn drive(app: App, mut feed: impl Feed) -> Result<()> {
    let mut screen = Screen::enter(app)?;
    loop {
        feed.hold(screen.app.ui.paused);
        tokio::select! {
            biased;
            flow = screen.keys() => if flow? == Flow::Quit {
                break;
            },
            fed = feed.next() => if screen.take(fed?)? == Flow::Quit {
                break;
            },
        }
    }
    Ok(())
}

/// The live view as a [`Pipeline`]'s front end (the probes, a recording, the demo), with the
/// demo's captions.
struct LiveFront {
    screen: Screen,
    captions: Option<std::sync::mpsc::Receiver<String>>,
    caption_poll: tokio::time::Interval,
    /// The recording replayed, if it is one.
    replay: Option<std::path::PathBuf>,
    /// `-n`: intervals to show before quitting.
    limit: Option<u64>,
    intervals: u64,
}

/// The live view's flow as the pipeline's loop's.
fn flow(flow: Flow) -> pipeline::Flow {
    match flow {
        Flow::Continue => pipeline::Flow::Continue,
        Flow::Quit => pipeline::Flow::Stop,
    }
}

impl Front for LiveFront {
    async fn other(&mut self) -> Result<pipeline::Flow> {
        loop {
            tokio::select! {
                biased;
                keys = self.screen.keys() => return keys.map(flow),
                _ = self.caption_poll.tick(), if self.captions.is_some() => {
                    let latest = self.captions.as_ref().and_then(|rx| rx.try_iter().last());
                    if let Some(caption) = latest {
                        return self.screen.take(Fed::Caption(caption)).map(flow);
                    }
                }
            }
        }
    }

    fn interval(&mut self, snap: Box<Snapshot>) -> Result<pipeline::Flow> {
        self.intervals += 1;
        if self.screen.take(Fed::Interval(snap))? == Flow::Quit
            || self.limit.is_some_and(|n| self.intervals >= n)
        {
            return Ok(pipeline::Flow::Stop);
        }
        Ok(pipeline::Flow::Continue)
    }

    fn ended(&mut self) -> Result<pipeline::Flow> {
        let note = match &self.replay {
            Some(path) => format!("end of the recording {} (q quits)", path.display()),
            None => "no more intervals (q quits)".to_string(),
        };
        // The view stays until q.
        self.screen.take(Fed::Ended(note)).map(flow)
    }

    fn held(&self) -> bool {
        self.screen.app.ui.paused
    }
}

// Every pane on real recordings, driven through `App` as the live view drives it.
#[cfg(test)]
mod recorded_tests;

#[cfg(test)]
mod tests {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    use super::*;
    use crate::{model::fixtures::demo_snapshot, view::SortKey};

    fn app() -> App {
        let mut app = App::new(UiState::default());
        app.update(demo_snapshot());
        app
    }

    fn press(app: &mut App, code: KeyCode) -> Flow {
        app.on_key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn typed(app: &mut App, text: &str) {
        for c in text.chars() {
            press(app, KeyCode::Char(c));
        }
    }

    #[test]
    fn q_and_ctrl_c_quit() {
        let mut app = app();
        assert_eq!(press(&mut app, KeyCode::Char('x')), Flow::Continue);
        assert_eq!(press(&mut app, KeyCode::Char('q')), Flow::Quit);
        assert_eq!(
            app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Flow::Quit
        );
    }

    #[test]
    fn selection_follows_the_process_not_the_row() {
        let mut app = app();
        press(&mut app, KeyCode::Down);
        assert_eq!(app.ui.selected_pid, Some(777), "first row: the busiest");
        press(&mut app, KeyCode::Char('j'));
        assert_eq!(app.ui.selected_pid, Some(4242));
        // Re-sorting moves the row; the selection stays on the same process.
        app.ui.sort = SortKey::Pid;
        assert_eq!(app.ui.selected_pid, Some(4242));
        press(&mut app, KeyCode::Char('k'));
        assert_eq!(
            app.ui.selected_pid,
            Some(777),
            "pid order: 311, 777, 4242, 9001"
        );
        press(&mut app, KeyCode::End);
        assert_eq!(app.ui.selected_pid, Some(9001));
        press(&mut app, KeyCode::Down);
        assert_eq!(app.ui.selected_pid, Some(9001), "clamped at the end");
        press(&mut app, KeyCode::Home);
        assert_eq!(app.ui.selected_pid, Some(311));
    }

    #[test]
    fn enter_drills_into_the_selected_process_and_esc_comes_back() {
        let mut app = app();
        press(&mut app, KeyCode::Enter);
        assert!(app.ui.show_detail);
        assert_eq!(
            app.ui.selected_pid,
            Some(777),
            "Enter with no selection picks the top row"
        );
        assert_eq!(press(&mut app, KeyCode::Esc), Flow::Continue);
        assert!(!app.ui.show_detail);
        assert_eq!(
            app.ui.selected_pid,
            Some(777),
            "closing the drill-down keeps the selection"
        );
    }

    #[test]
    fn tab_moves_focus_and_the_disk_selection() {
        let mut app = app();
        press(&mut app, KeyCode::Tab);
        assert_eq!(app.ui.focus, Focus::Findings);
        press(&mut app, KeyCode::Tab);
        assert_eq!(app.ui.focus, Focus::Disks);
        press(&mut app, KeyCode::Down);
        assert_eq!(
            app.ui.selected_disk.map(|d| d.to_string()),
            Some("7:0".into())
        );
        press(&mut app, KeyCode::Tab);
        assert_eq!(app.ui.focus, Focus::Processes);
    }

    /// The demo's snapshot with lab001 gone: no row, its finding ended 5 s ago.
    fn lab001_exited() -> Snapshot {
        let mut snap = demo_snapshot();
        snap.seq += 1;
        snap.procs.retain(|p| p.tgid != 5689);
        for f in &mut snap.findings {
            if f.tgid == Some(5689) {
                f.active = false;
                f.last_seen_ns = snap.now_ns - 5_000_000_000;
            }
        }
        snap
    }

    #[test]
    fn tab_reaches_the_findings_with_a_line_selected_and_jk_move_it() {
        let mut app = app();
        press(&mut app, KeyCode::Tab);
        assert_eq!(app.ui.focus, Focus::Findings);
        let key = |app: &App| {
            app.ui
                .selected_finding
                .as_ref()
                .map(|k| (k.kind.name(), k.who.clone()))
        };
        assert_eq!(
            key(&app),
            Some(("write_amplification", "lab001".into())),
            "entering the pane selects its first line"
        );
        press(&mut app, KeyCode::Char('j'));
        assert_eq!(key(&app), Some(("long_d_state", "make".into())));
        press(&mut app, KeyCode::Char('j'));
        assert_eq!(key(&app), Some(("long_d_state", "make".into())), "clamped");
        press(&mut app, KeyCode::Char('k'));
        assert_eq!(key(&app), Some(("write_amplification", "lab001".into())));
        assert_eq!(
            app.ui.selected_pid, None,
            "the process selection is not moved"
        );
        press(&mut app, KeyCode::BackTab);
        assert_eq!(app.ui.focus, Focus::Processes);
        press(&mut app, KeyCode::BackTab);
        assert_eq!(
            app.ui.focus,
            Focus::Disks,
            "Shift-Tab goes round the other way"
        );
        press(&mut app, KeyCode::BackTab);
        assert_eq!(app.ui.focus, Focus::Findings);
    }

    #[test]
    fn tab_passes_over_the_findings_when_there_are_none() {
        let mut app = App::new(UiState::default());
        let mut snap = demo_snapshot();
        snap.findings.clear();
        app.update(snap);
        press(&mut app, KeyCode::Tab);
        assert_eq!(app.ui.focus, Focus::Disks);
        press(&mut app, KeyCode::BackTab);
        assert_eq!(app.ui.focus, Focus::Processes);
        press(&mut app, KeyCode::BackTab);
        assert_eq!(app.ui.focus, Focus::Disks);
    }

    #[test]
    fn a_finding_opens_after_its_process_exited_and_esc_closes_it() {
        let mut app = app();
        app.update(lab001_exited());
        press(&mut app, KeyCode::Tab);
        press(&mut app, KeyCode::Char('j'));
        let selected = app.ui.selected_finding.clone().unwrap();
        assert_eq!(
            (selected.kind.name(), selected.who.as_str()),
            ("write_amplification", "lab001"),
            "the ended finding comes after the active one"
        );
        press(&mut app, KeyCode::Enter);
        assert!(app.ui.show_finding);
        assert!(!app.ui.show_detail);
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
        app.draw(&mut terminal).unwrap();
        let screen = crate::front::capture::screen_text(terminal.backend().buffer());
        let fix = &app
            .shown
            .findings
            .iter()
            .find(|f| f.tgid == Some(5689))
            .unwrap()
            .fix;
        let first_words: String = fix.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
        assert!(screen.contains("lab001 pid 5689"), "{screen}");
        assert!(screen.contains("ended 5s ago"), "{screen}");
        assert!(
            screen.contains(&format!("fix      {first_words}")),
            "{screen}"
        );
        press(&mut app, KeyCode::Esc);
        assert!(!app.ui.show_finding);
        assert_eq!(
            app.ui.selected_finding,
            Some(selected),
            "closing keeps the selection"
        );
        assert_eq!(app.ui.focus, Focus::Findings);
    }

    #[test]
    fn the_text_scrolls_only_as_far_as_it_goes() {
        let mut app = app();
        app.size = (60, 16);
        press(&mut app, KeyCode::Tab);
        press(&mut app, KeyCode::Enter);
        assert!(app.ui.show_finding);
        let max = finding::max_scroll(&app.shown, &app.ui, app.size);
        assert!(max > 0, "a long text on a small screen scrolls");
        for _ in 0..100 {
            press(&mut app, KeyCode::Char('j'));
        }
        assert_eq!(app.ui.scroll, max);
        press(&mut app, KeyCode::PageUp);
        assert_eq!(app.ui.scroll, max.saturating_sub(10));
        assert!(app.ui.show_finding, "scrolling keeps it open");
    }

    #[test]
    fn a_finding_no_longer_listed_closes_its_text_and_the_pane_gives_up_focus() {
        let mut app = app();
        press(&mut app, KeyCode::Tab);
        press(&mut app, KeyCode::Enter);
        assert!(app.ui.show_finding);
        let mut gone = demo_snapshot();
        gone.seq += 1;
        gone.findings.clear();
        app.update(gone);
        assert!(!app.ui.show_finding);
        assert!(
            app.ui
                .message
                .as_deref()
                .unwrap_or("")
                .contains("no longer listed"),
            "{:?}",
            app.ui.message
        );
        assert_eq!(app.ui.focus, Focus::Processes);
    }

    #[test]
    fn a_paused_screen_keeps_the_finding_open() {
        let mut app = app();
        press(&mut app, KeyCode::Tab);
        press(&mut app, KeyCode::Enter);
        press(&mut app, KeyCode::Char('p'));
        let mut gone = demo_snapshot();
        gone.seq += 1;
        gone.findings.clear();
        app.update(gone);
        assert!(app.ui.show_finding, "the frozen interval still lists it");
    }

    #[test]
    fn a_demo_step_starts_with_a_clear_board() {
        let mut app = app();
        assert_eq!(app.shown.findings.len(), 2);
        app.clear_board();
        let since = app.shown.now_ns;
        let interval = app.shown.interval_ns.max(1);
        // The next interval still lists the old step's findings (fading): not shown.
        let mut next = demo_snapshot();
        next.seq += 1;
        next.now_ns = since + interval;
        for f in &mut next.findings {
            f.active = false;
        }
        app.update(next.clone());
        assert!(app.shown.findings.is_empty(), "{:?}", app.shown.findings);
        // A finding new in this step is shown, and an old one that goes on is shown again.
        next.seq += 1;
        next.now_ns = since + 3 * interval;
        next.findings[0].active = true;
        next.findings[0].last_seen_ns = next.now_ns;
        let mut fresh = next.findings[1].clone();
        fresh.first_seen_ns = since + interval / 2;
        fresh.last_seen_ns = since + interval / 2;
        fresh.tgid = Some(1);
        next.findings.push(fresh);
        app.update(next);
        let tgids: Vec<Option<u32>> = app.shown.findings.iter().map(|f| f.tgid).collect();
        assert_eq!(tgids, [Some(5689), Some(1)]);
    }

    #[test]
    fn sort_keys_cycle_and_reverse() {
        let mut app = app();
        assert_eq!(app.ui.sort, SortKey::TotalBytes);
        press(&mut app, KeyCode::Char('s'));
        assert_eq!(app.ui.sort, SortKey::P50);
        press(&mut app, KeyCode::Char('<'));
        press(&mut app, KeyCode::Char('<'));
        assert_eq!(app.ui.sort, SortKey::WriteBytes);
        press(&mut app, KeyCode::Char('r'));
        assert!(app.ui.reversed);
        press(&mut app, KeyCode::Char('>'));
        assert!(!app.ui.reversed, "a new column starts in its natural order");
    }

    #[test]
    fn sorting_picks_only_columns_on_screen() {
        let mut app = app();
        app.size = (80, 24);
        let mut seen = Vec::new();
        for _ in 0..SortKey::ALL.len() {
            press(&mut app, KeyCode::Char('s'));
            seen.push(app.ui.sort);
        }
        // At 80 columns the sync p99 and time-in-D columns are not drawn.
        assert!(!seen.contains(&SortKey::SyncP99), "{seen:?}");
        assert!(!seen.contains(&SortKey::DState), "{seen:?}");
        assert!(seen.contains(&SortKey::Amplification), "{seen:?}");
        app.size = (120, 40);
        app.ui.sort = SortKey::Amplification;
        press(&mut app, KeyCode::Char('>'));
        assert_eq!(app.ui.sort, SortKey::DState, "from 90 columns D is drawn");
        press(&mut app, KeyCode::Char('<'));
        press(&mut app, KeyCode::Char('<'));
        assert_eq!(app.ui.sort, SortKey::SyncP99);
    }

    #[test]
    fn x_expands_and_folds_kernel_workers() {
        let mut app = app();
        assert!(!app.ui.expand_workers);
        press(&mut app, KeyCode::Char('x'));
        assert!(app.ui.expand_workers);
        press(&mut app, KeyCode::Char('x'));
        assert!(!app.ui.expand_workers);
    }

    #[test]
    fn filter_is_typed_applied_and_cleared() {
        let mut app = app();
        press(&mut app, KeyCode::Char('/'));
        typed(&mut app, "pgq");
        press(&mut app, KeyCode::Backspace);
        assert_eq!(app.ui.filter, "pg");
        assert_eq!(
            press(&mut app, KeyCode::Char('q')),
            Flow::Continue,
            "q is text while typing"
        );
        press(&mut app, KeyCode::Enter);
        assert_eq!(app.ui.filter, "pgq");
        assert!(!app.ui.editing_filter);
        press(&mut app, KeyCode::Esc);
        assert!(app.ui.filter.is_empty());
    }

    #[test]
    fn pause_freezes_the_screen_and_help_closes_on_any_key() {
        let mut app = app();
        press(&mut app, KeyCode::Char(' '));
        assert!(app.ui.paused);
        let before = app.shown.seq;
        app.update(crate::model::Snapshot {
            seq: before + 1,
            ..Default::default()
        });
        assert_eq!(
            app.shown.seq, before,
            "paused: the new interval is not shown"
        );
        press(&mut app, KeyCode::Char('p'));
        app.update(crate::model::Snapshot {
            seq: before + 2,
            ..Default::default()
        });
        assert_eq!(app.shown.seq, before + 2);
        press(&mut app, KeyCode::Char('?'));
        assert!(app.ui.show_help);
        assert_eq!(press(&mut app, KeyCode::Char('j')), Flow::Continue);
        assert!(!app.ui.show_help);
        press(&mut app, KeyCode::Char('c'));
        assert!(app.ui.cumulative);
    }

    fn app_with_history() -> App {
        use crate::history::fixtures::{INTERVALS, snapshot_at};
        let mut app = App::new(UiState::default());
        for seq in 1..=INTERVALS {
            app.update(snapshot_at(seq));
        }
        app
    }

    #[test]
    fn stepping_back_pauses_and_shows_past_intervals() {
        let mut app = app_with_history();
        assert_eq!(app.shown.seq, 90);
        press(&mut app, KeyCode::Char('['));
        assert!(app.ui.paused, "stepping back pauses");
        assert_eq!((app.shown.seq, app.ui.back), (89, 1));
        press(&mut app, KeyCode::Left);
        press(&mut app, KeyCode::Left);
        assert_eq!((app.shown.seq, app.ui.back), (87, 3));
        press(&mut app, KeyCode::Right);
        assert_eq!(app.shown.seq, 88);
        // New intervals keep arriving while paused: the screen stays, "back" grows.
        app.update(crate::history::fixtures::snapshot_at(91));
        assert_eq!((app.shown.seq, app.ui.back), (88, 3));
        for _ in 0..200 {
            press(&mut app, KeyCode::Char('['));
        }
        assert_eq!(app.shown.seq, 1, "stops at the oldest kept interval");
        for _ in 0..200 {
            press(&mut app, KeyCode::Char(']'));
        }
        assert_eq!((app.shown.seq, app.ui.back), (91, 0), "and at the newest");
        press(&mut app, KeyCode::Left);
        press(&mut app, KeyCode::Char(' '));
        assert!(!app.ui.paused);
        assert_eq!(
            (app.shown.seq, app.ui.back),
            (91, 0),
            "resuming shows the newest"
        );
    }

    #[test]
    fn heat_map_keys() {
        let mut app = app();
        assert!(!app.ui.show_heatmap);
        press(&mut app, KeyCode::Char('H'));
        assert!(app.ui.show_heatmap);
        assert_eq!(app.ui.heat_kind, crate::view::HeatKind::Device);
        press(&mut app, KeyCode::Char('l'));
        assert_eq!(app.ui.heat_kind, crate::view::HeatKind::Sync);
        press(&mut app, KeyCode::Char('l'));
        assert_eq!(app.ui.heat_kind, crate::view::HeatKind::Total);
        press(&mut app, KeyCode::Char('H'));
        assert!(!app.ui.show_heatmap);
    }

    #[test]
    fn w_saves_the_screen_as_drawn_and_says_where() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("iotop-bpf-app-w-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut app = app();
        app.ui.host = "db01".into();
        app.capture_dir = Some(dir.clone());
        app.size = (100, 30);
        press(&mut app, KeyCode::Char('w'));
        let message = app.ui.message.clone().unwrap();
        assert!(message.starts_with("saved "), "{message}");
        let path = std::path::PathBuf::from(
            message
                .trim_start_matches("saved ")
                .trim_end_matches(" (and .md)"),
        );
        assert!(path.starts_with(&dir), "{}", path.display());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 30);
        assert!(
            text.contains("PID     COMM") && text.contains("lab001"),
            "{text}"
        );
        let md = std::fs::read_to_string(path.with_extension("md")).unwrap();
        assert!(md.contains("write_amplification"), "{md}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        press(&mut app, KeyCode::Char('j'));
        assert!(app.ui.message.is_none(), "the next key clears the message");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // The process table's rows on screen as `App` settles them interval after interval.
    mod steady_rows {
        use crate::{
            model::{Snapshot, fixtures::demo_snapshot},
            view::{
                SortKey,
                tests::{draw_with, text, ui},
            },
        };

        use super::super::App;

        /// The screen row of `pid`'s line in the process table.
        fn row_of(screen: &str, pid: u32) -> Option<usize> {
            screen.lines().position(|l| {
                l.get(1..)
                    .is_some_and(|r| r.starts_with(&format!("{pid} ")))
            })
        }

        #[test]
        fn near_equal_processes_keep_their_rows_and_a_clear_leader_moves_up_at_once() {
            let mut app = App::new(ui());
            let mut snap = demo_snapshot();
            let set = |snap: &mut Snapshot, pid: u32, mib: u64| {
                let p = snap.procs.iter_mut().find(|p| p.tgid == pid).unwrap();
                p.interval.read_bytes = mib << 20;
                p.interval.write_bytes = 0;
                p.interval.writeback_bytes = 0;
                p.interval.wrote_back_bytes = 0;
            };
            // restic ahead, then the two take turns being 5% ahead of each other, second after
            // second, as two similar writers do: the rows stay where they were.
            set(&mut snap, 777, 100);
            set(&mut snap, 4242, 96);
            app.update(snap.clone());
            let first = text(&draw_with(80, 30, &app.shown, &app.history, &app.ui));
            let (restic, postgres) = (row_of(&first, 777).unwrap(), row_of(&first, 4242).unwrap());
            assert_eq!(postgres, restic + 1, "{first}");
            for second in 0..6 {
                let (a, b) = if second % 2 == 0 {
                    (96, 101)
                } else {
                    (101, 96)
                };
                snap.seq += 1;
                set(&mut snap, 777, a);
                set(&mut snap, 4242, b);
                app.update(snap.clone());
                let screen = text(&draw_with(80, 30, &app.shown, &app.history, &app.ui));
                assert_eq!(
                    (row_of(&screen, 777), row_of(&screen, 4242)),
                    (Some(restic), Some(postgres)),
                    "second {second}:\n{screen}"
                );
            }
            // postgres doubles restic: it overtakes at once.
            snap.seq += 1;
            set(&mut snap, 777, 100);
            set(&mut snap, 4242, 200);
            app.update(snap.clone());
            let screen = text(&draw_with(80, 30, &app.shown, &app.history, &app.ui));
            assert_eq!(
                (row_of(&screen, 4242), row_of(&screen, 777)),
                (Some(restic), Some(postgres)),
                "{screen}"
            );
            // Another sort starts in its own order at once.
            app.ui.sort = SortKey::Pid;
            let screen = text(&draw_with(80, 30, &app.shown, &app.history, &app.ui));
            assert!(row_of(&screen, 777) < row_of(&screen, 4242), "{screen}");
        }
    }
}
