//! The live view's state machine (keys -> `view::UiState`) and its event loop.

use anyhow::Result;
use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::{
    Terminal,
    backend::{Backend, TestBackend},
};

use super::capture;
use crate::{
    history::History,
    model::Snapshot,
    view::{self, Focus, Rows, Theme, UiState, finding, findings, procs},
};

/// Whether the loop goes on: the one loop's own (`pipeline::drive`).
pub use crate::pipeline::Flow;

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

    /// A new interval closed: recorded, and shown unless paused. Its names are shown as
    /// every text output shows them (`shown::defuse`), before anything counts their widths.
    pub fn update(&mut self, mut snap: Snapshot) {
        shown::defuse(&mut snap);
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
    /// pane that is gone. The rows are derived once for it ([`Rows`]).
    fn settle(&mut self) {
        let rows = Rows::new(&self.shown, &self.ui);
        let groups = &rows.groups;
        if self.ui.show_finding && findings::selected(groups, &self.ui).is_none() {
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
        self.ui.order = rows.next_order(&self.ui);
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
                Ok(path) => format!("saved {} (and .md)", crate::names::path(&path)),
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
            return Flow::Stop;
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
                Flow::Stop
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
            KeyCode::Char('q') => return Flow::Stop,
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
                let rows = Rows::new(&self.shown, &self.ui);
                let pids: Vec<u32> = if self.ui.by_cgroup {
                    rows.visible.iter().map(|p| p.tgid).collect()
                } else {
                    rows.entries
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

// The loops, and what feeds them.
mod live;
// The snapshot's names, shown.
mod shown;
pub use live::{Fed, Starting, ViewOptions, Viewer, run, run_captioned};

// Every pane on real recordings, driven through `App` as the live view drives it.
#[cfg(test)]
mod recorded_tests;

#[cfg(test)]
mod tests;
