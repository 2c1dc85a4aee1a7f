//! Render tests: the whole screen at the sizes people use, as text snapshots.

use ratatui::{Terminal, backend::TestBackend};

use super::*;
use crate::model::{Dev, fixtures::demo_snapshot};

fn ui() -> UiState {
    UiState {
        host: "db01".into(),
        kernel: "6.18.44".into(),
        ..UiState::default()
    }
}

fn draw(width: u16, height: u16, snap: &Snapshot, ui: &UiState) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|frame| render(frame, snap, ui, &Theme::default()))
        .unwrap();
    terminal
}

fn text(terminal: &Terminal<TestBackend>) -> String {
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..buffer.area.height {
        for x in 0..buffer.area.width {
            out.push_str(buffer[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

#[test]
fn dashboard_80x24() {
    let snap = demo_snapshot();
    let mut ui = ui();
    ui.selected_pid = Some(4242);
    insta::assert_snapshot!(text(&draw(80, 24, &snap, &ui)));
}

#[test]
fn dashboard_120x40() {
    let snap = demo_snapshot();
    let mut ui = ui();
    ui.focus = Focus::Disks;
    ui.selected_disk = Some(Dev::new(7, 0));
    insta::assert_snapshot!(text(&draw(120, 40, &snap, &ui)));
}

#[test]
fn help_overlay_80x24() {
    let mut ui = ui();
    ui.show_help = true;
    insta::assert_snapshot!(text(&draw(80, 24, &demo_snapshot(), &ui)));
}

#[test]
fn drill_down_80x24() {
    let mut ui = ui();
    ui.selected_pid = Some(5689);
    ui.show_detail = true;
    insta::assert_snapshot!(text(&draw(80, 24, &demo_snapshot(), &ui)));
}

#[test]
fn drill_down_120x40() {
    let mut ui = ui();
    ui.selected_pid = Some(5689);
    ui.show_detail = true;
    insta::assert_snapshot!(text(&draw(120, 40, &demo_snapshot(), &ui)));
}

#[test]
fn rows_with_a_finding_are_marked_with_a_symbol() {
    let screen = text(&draw(80, 24, &demo_snapshot(), &ui()));
    let lab001 = screen.lines().find(|l| l.starts_with("5689 ")).unwrap();
    assert!(lab001.contains("‼ lab001"), "{screen}");
    assert!(screen.contains("‼ CRIT write_amplification"), "{screen}");
}

#[test]
fn the_busiest_process_comes_first_and_the_selection_is_marked_without_colour() {
    let snap = demo_snapshot();
    let mut ui = ui();
    ui.selected_pid = Some(777);
    let screen = text(&draw(80, 24, &snap, &ui));
    let rows: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains("restic") || l.contains("postgres"))
        .collect();
    assert!(
        rows[0].contains("restic"),
        "restic moves 31 MiB/s, postgres 3 MiB/s:\n{screen}"
    );
    assert!(rows[0].starts_with(theme::SELECTED_SYMBOL), "{screen}");
}

#[test]
fn filter_by_name_or_pid() {
    let snap = demo_snapshot();
    let mut ui = ui();
    ui.filter = "POST".into();
    let screen = text(&draw(80, 24, &snap, &ui));
    assert!(
        screen.contains("postgres") && !screen.contains("restic"),
        "{screen}"
    );
    ui.filter = "777".into();
    let screen = text(&draw(80, 24, &snap, &ui));
    assert!(
        screen.contains("restic") && !screen.contains("postgres"),
        "{screen}"
    );
}

#[test]
fn a_tiny_terminal_gets_a_message_not_a_panic() {
    let screen = text(&draw(40, 10, &demo_snapshot(), &ui()));
    assert!(screen.contains("Terminal too small"), "{screen}");
    let _ = draw(1, 1, &demo_snapshot(), &ui());
    let _ = draw(MIN_WIDTH, MIN_HEIGHT, &demo_snapshot(), &ui());
}

#[test]
fn an_empty_snapshot_renders() {
    let screen = text(&draw(80, 24, &Snapshot::default(), &ui()));
    assert!(screen.contains("no block I/O"), "{screen}");
}
