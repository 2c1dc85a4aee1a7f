//! The live view's state machine (keys -> [`UiState`]) and its event loop.

use anyhow::{Context as _, Result};
use crossterm::event::{Event, EventStream, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use futures::StreamExt as _;
use ratatui::{Terminal, backend::Backend};

use crate::{
    cli::Cli,
    model::Snapshot,
    pipeline::{Pipeline, Step},
    shutdown::Shutdown,
    term::TerminalGuard,
    view::{self, Focus, Theme, UiState, disks, procs},
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
    /// The snapshot on screen (frozen while paused).
    pub shown: Snapshot,
}

impl App {
    pub fn new(ui: UiState) -> Self {
        Self {
            ui,
            theme: Theme::default(),
            shown: Snapshot::default(),
        }
    }

    /// A new interval closed; shown unless paused.
    pub fn update(&mut self, snap: Snapshot) {
        if !self.ui.paused {
            self.shown = snap;
        }
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
        if ui.show_detail && matches!(key.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Backspace)
        {
            ui.show_detail = false;
            return Flow::Continue;
        }
        match key.code {
            KeyCode::Char('q') => return Flow::Quit,
            KeyCode::Char(' ' | 'p') => ui.paused = !ui.paused,
            KeyCode::Tab | KeyCode::BackTab => {
                ui.focus = match ui.focus {
                    Focus::Processes => Focus::Disks,
                    Focus::Disks => Focus::Processes,
                };
            }
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::Home | KeyCode::Char('g') => self.move_selection(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(isize::MAX / 2),
            KeyCode::Char('s' | '>') => {
                ui.sort = ui.sort.next();
                ui.reversed = false;
            }
            KeyCode::Char('<') => {
                ui.sort = ui.sort.prev();
                ui.reversed = false;
            }
            KeyCode::Char('r') => ui.reversed = !ui.reversed,
            KeyCode::Char('/') => ui.editing_filter = true,
            KeyCode::Char('c') => ui.cumulative = !ui.cumulative,
            KeyCode::Char('?' | 'h') | KeyCode::F(1) => ui.show_help = true,
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
            }
            _ => {}
        }
        Flow::Continue
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
                let rows = procs::visible(&self.shown, &self.ui);
                let current = self
                    .ui
                    .selected_pid
                    .and_then(|pid| rows.iter().position(|p| p.tgid == pid));
                self.ui.selected_pid = step(current, rows.len()).map(|i| rows[i].tgid);
            }
            Focus::Disks => {
                let rows = disks::visible(&self.shown, &self.ui);
                let current = self
                    .ui
                    .selected_disk
                    .and_then(|dev| rows.iter().position(|d| d.dev == dev));
                self.ui.selected_disk = step(current, rows.len()).map(|i| rows[i].dev);
            }
        }
    }

    pub fn draw(&self, terminal: &mut Terminal<impl Backend>) -> Result<()> {
        terminal
            .draw(|frame| view::render(frame, &self.shown, &self.ui, &self.theme))
            .map_err(|e| anyhow::anyhow!("draw the screen: {e}"))?;
        Ok(())
    }
}

/// The view's starting state: `-p PID` becomes the filter.
fn initial_ui(cli: &Cli, host: String, kernel: String, notes: Vec<String>) -> UiState {
    UiState {
        host,
        kernel,
        notes,
        filter: cli
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
/// terminal is taken, so a failure to load the probes prints plainly.
pub async fn run(cli: &Cli, mut pipeline: Pipeline) -> Result<()> {
    let mut shutdown = Shutdown::install().context("install signal handlers")?;
    let mut notes = pipeline.notes();
    if let Some(path) = &cli.replay {
        notes.insert(0, format!("replaying {}", path.display()));
    }
    let info = pipeline.info().clone();
    let mut app = App::new(initial_ui(cli, info.host, info.kernel, notes));
    let mut guard = TerminalGuard::enter()?;
    let mut input = EventStream::new();
    let mut intervals = 0u64;
    let mut ended = false;
    app.draw(guard.terminal())?;
    loop {
        pipeline.hold(app.ui.paused);
        tokio::select! {
            biased;
            () = shutdown.recv() => break,
            event = input.next() => match event {
                Some(Ok(event)) => {
                    if app.on_event(&event) == Flow::Quit {
                        break;
                    }
                    app.draw(guard.terminal())?;
                }
                Some(Err(e)) => return Err(e).context("read the terminal"),
                None => break,
            },
            step = pipeline.next(), if !ended => {
                match step? {
                    Step::Interval(snap) => {
                        app.update(*snap);
                        intervals += 1;
                    }
                    Step::End => {
                        ended = true;
                        if let Some(path) = &cli.replay {
                            app.ui.notes = vec![format!("end of the recording {} (q quits)", path.display())];
                        }
                    }
                }
                app.draw(guard.terminal())?;
                if cli.iterations.is_some_and(|n| intervals >= n) {
                    break;
                }
            }
        }
    }
    Ok(())
}

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
        assert_eq!(app.ui.focus, Focus::Disks);
        press(&mut app, KeyCode::Down);
        assert_eq!(
            app.ui.selected_disk.map(|d| d.to_string()),
            Some("7:0".into())
        );
        press(&mut app, KeyCode::Tab);
        assert_eq!(app.ui.focus, Focus::Processes);
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
}
