//! The findings' pane: how it says it can be reached, and its focus.

use super::*;

#[test]
fn an_unfocused_findings_pane_says_how_to_reach_it_and_counts_what_it_hides() {
    let screen = text(&draw(80, 24, &incident_snapshot(), &ui()));
    assert!(
        screen.contains(" Findings: 4 active, 2 ended · +4 more ─ Tab: open one"),
        "{screen}"
    );
    assert!(
        screen.contains("‼ CRIT write_amplification lab001 pid 5689 …/lab/lab001.data")
            || screen.contains("‼ CRIT write_amplification lab001 pid 5689 /srv/lab/lab001.data"),
        "at 80 columns the file comes before the numbers:\n{screen}"
    );
    assert!(!screen.contains("▸ Findings"), "{screen}");
}

#[test]
fn the_focused_pane_is_marked_before_a_row_is_selected() {
    for (focus, title) in [
        (Focus::Processes, "▸ Processes by"),
        (Focus::Disks, "▸ Disks"),
        (Focus::Findings, "▸ Findings"),
    ] {
        let mut ui = ui();
        ui.focus = focus;
        let screen = text(&draw(80, 24, &demo_snapshot(), &ui));
        assert!(screen.contains(title), "{title}:\n{screen}");
        assert_eq!(
            screen.matches('▸').count(),
            1,
            "one pane has the keys:\n{screen}"
        );
    }
}
