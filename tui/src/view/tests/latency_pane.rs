//! The latency pane and the heat map: where a spike shows, outliers, labels that hold still.

use super::*;

#[test]
fn the_heat_map_shows_the_spike_where_it_happened() {
    let history = demo_history();
    let snap = history.snapshot(INTERVALS).unwrap().clone();
    let mut ui = history_ui();
    ui.show_heatmap = true;
    ui.focus = Focus::Disks;
    ui.selected_disk = Some(Dev::new(7, 0));
    let screen = text(&draw_with(120, 40, &snap, &history, &ui));
    // loop0's device time sat at 256us-1ms and jumped 16x for intervals 40 to 54: the rows
    // of 4 ms and more are lit there only, 36 to 50 columns left of the newest.
    let axis = screen.lines().find(|l| l.contains('└')).unwrap();
    let right = axis.chars().count() - 1;
    let slow = screen
        .lines()
        .find(|l| l.trim_start().starts_with("4ms│"))
        .unwrap_or_else(|| panic!("{screen}"));
    let lit: Vec<usize> = slow
        .chars()
        .enumerate()
        .filter(|(_, c)| "░▒▓█".contains(*c))
        .map(|(i, _)| right - i)
        .collect();
    assert!(!lit.is_empty(), "{screen}");
    assert!(
        lit.iter().all(|back| (36..=50).contains(back)),
        "{lit:?}\n{screen}"
    );
}

#[test]
fn one_huge_outlier_takes_the_last_row_and_leaves_the_rest_apart() {
    let mut device = TEN_US_TO_TWO_MS.to_vec();
    // One request of 65 ms.
    device.push((17, 1));
    let (snap, ui) = latency_spread(&device);
    let screen = text(&draw(80, 24, &snap, &ui));
    let rows = device_rows(&screen);
    let filled = rows.iter().filter(|(_, n)| *n > 0).count();
    assert!(filled >= 4, "{rows:?}\n{screen}");
    let (last, n) = rows.last().unwrap();
    assert!(last.starts_with('≥'), "{rows:?}\n{screen}");
    // The outlier is counted with the slowest of the body, not with everything.
    assert!(*n < 1951 / 2, "{rows:?}\n{screen}");
    assert!(rows[0].1 < 1951 / 2, "{rows:?}\n{screen}");
}

#[test]
fn latency_labels_stay_between_two_similar_intervals() {
    let (snap, ui) = latency_spread(&TEN_US_TO_TWO_MS);
    // The next second: a few more of each, and fewer of the slowest.
    let next: Vec<(usize, u64)> = TEN_US_TO_TWO_MS
        .iter()
        .map(|&(slot, n)| (slot, if slot == 11 { 30 } else { n + n / 8 }))
        .collect();
    let (next_snap, _) = latency_spread(&next);
    let labels = |snap: &Snapshot| -> Vec<String> {
        device_rows(&text(&draw(80, 24, snap, &ui)))
            .into_iter()
            .map(|(label, _)| label)
            .collect()
    };
    let (a, b) = (labels(&snap), labels(&next_snap));
    assert!(a.len() >= 4, "{a:?}");
    assert_eq!(a, b);
}

#[test]
fn the_heat_map_rows_come_from_the_observed_range() {
    let history = demo_history();
    let snap = history.snapshot(INTERVALS).unwrap().clone();
    let mut ui = history_ui();
    ui.show_heatmap = true;
    ui.focus = Focus::Disks;
    ui.selected_disk = Some(Dev::new(7, 0));
    for (width, height) in [(80, 24), (120, 40)] {
        let screen = text(&draw_with(width, height, &snap, &history, &ui));
        let rows: Vec<&str> = screen
            .lines()
            .filter(|l| l.contains('│') && !l.trim_start().starts_with('│'))
            .filter(|l| l.split('│').next().is_some_and(|s| !s.trim().is_empty()))
            .collect();
        let lit = rows
            .iter()
            .filter(|l| l.chars().any(|c| "░▒▓█".contains(c)))
            .count();
        // loop0's device time spans several octaves (microseconds to milliseconds) in view:
        // no row under 1 us (the pane is not filled down from the maximum), and at least
        // three lit rows even at 80x24 (three rows is all it has there).
        assert!(lit >= 3, "{width}x{height}: {rows:?}\n{screen}");
        assert!(
            !rows
                .iter()
                .any(|l| l.contains("<1us│") || l.contains(" 1us│")),
            "{screen}"
        );
        if height >= 40 {
            assert!(lit >= 4, "{rows:?}\n{screen}");
        }
    }
}
