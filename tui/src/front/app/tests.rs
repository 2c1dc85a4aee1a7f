//! The live view's state machine: keys, pause and stepping back, findings, captures.

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
    assert_eq!(press(&mut app, KeyCode::Char('q')), Flow::Stop);
    assert_eq!(
        app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        Flow::Stop
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
