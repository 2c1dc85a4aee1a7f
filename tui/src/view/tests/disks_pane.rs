//! The disks' pane: the scheduler's split of queue time, and the columns a wide one adds.

use super::*;

#[test]
fn a_disk_with_a_scheduler_splits_its_queue_time_as_btt_does() {
    let snap = demo_snapshot();
    let mut ui = ui();
    ui.focus = Focus::Disks;
    ui.selected_disk = Some(Dev::new(259, 0));
    let screen = text(&draw(100, 40, &snap, &ui));
    let sched = screen
        .lines()
        .find(|l| l.contains("G2I "))
        .unwrap_or_else(|| {
            panic!("no scheduler line:\n{screen}");
        });
    assert!(
        sched.contains("mq-deadline G2I 2.0us I2D 81us avg (100%)") && sched.contains("(D2C)"),
        "{sched}"
    );
    // loop0 has no scheduler: no split.
    ui.selected_disk = Some(Dev::new(7, 0));
    let screen = text(&draw(100, 40, &snap, &ui));
    assert!(!screen.contains("G2I "), "{screen}");
}

#[test]
fn very_wide_disks_pane_adds_merges_and_keeps_readable_sparklines() {
    let history = demo_history();
    let snap = history.snapshot(INTERVALS).unwrap().clone();
    let narrow = text(&draw_with(160, 40, &snap, &history, &history_ui()));
    assert!(!narrow.contains("rrqm/s"), "{narrow}");
    let wide = text(&draw_with(200, 40, &snap, &history, &history_ui()));
    assert!(
        wide.contains("rrqm/s  wrqm/s") && wide.contains("IOPS trend"),
        "{wide}"
    );
}
