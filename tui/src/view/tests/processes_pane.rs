//! The processes' table: marks, order, selection, filter, cgroups; tiny and empty screens.

use super::*;

#[test]
fn rows_with_a_finding_are_marked_with_a_symbol() {
    let screen = text(&draw(80, 24, &demo_snapshot(), &ui()));
    let lab001 = screen.lines().find(|l| l.starts_with(" 5689 ")).unwrap();
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

#[test]
fn a_wide_table_names_each_process_cgroup_170x40() {
    let snap = demo_snapshot();
    let screen = text(&draw(170, 40, &snap, &ui()));
    let postgres = screen.lines().find(|l| l.contains("postgres ")).unwrap();
    assert!(postgres.contains("postgresql.service"), "{postgres}");
}

#[test]
fn cgroup_rows_sum_their_members_dirty_pauses_and_calls() {
    let snap = crate::model::fixtures::throttled_snapshot();
    let ui = ui();
    let members = procs::visible(&snap, &ui);
    let pauses: u64 = members
        .iter()
        .map(|p| p.interval.waits.dirty.pause_ns)
        .sum();
    let calls: u64 = members
        .iter()
        .map(|p| p.interval.waits.calls.latency.count)
        .sum();
    let worst = members
        .iter()
        .map(|p| p.interval.waits.calls.latency.p99_ns)
        .max()
        .unwrap();
    assert!(pauses > 0 && calls > 0, "the fixture has both");
    let groups = procs::by_cgroup(&snap, &ui);
    let sum = |f: fn(&crate::model::ProcRow) -> u64| groups.iter().map(f).sum::<u64>();
    assert_eq!(sum(|g| g.interval.waits.dirty.pause_ns), pauses);
    assert_eq!(sum(|g| g.interval.waits.calls.latency.count), calls);
    assert_eq!(
        groups
            .iter()
            .map(|g| g.interval.waits.calls.latency.p99_ns)
            .max(),
        Some(worst)
    );
}

#[test]
fn while_the_probes_load_the_empty_panes_say_so_not_that_there_was_no_io() {
    let mut ui = ui();
    ui.probes_loading = true;
    let screen = text(&draw(80, 24, &Snapshot::default(), &ui));
    assert!(screen.contains("the probes are loading"), "{screen}");
    assert!(!screen.contains("no block I/O"), "{screen}");
    ui.probes_loading = false;
    let screen = text(&draw(80, 24, &Snapshot::default(), &ui));
    assert!(screen.contains("no block I/O"), "{screen}");
}
