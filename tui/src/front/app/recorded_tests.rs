//! Render tests on real captured runs (`tui/tests/data/recordings/`, made by `make.sh` there
//! from real programs on loop-backed filesystems): every pane at 80x24, 100x30, 120x40,
//! 200x50 and 250x60, in the states people put the screen in. Each pane's rows on screen are
//! exactly the lines it laid out for its place (so nothing drew over it and its title is
//! whole), no line is wider than its pane (so nothing ran past the edge unseen), and the
//! filter, the focused pane and the sort column are always visible.

use std::path::PathBuf;

use ratatui::{Terminal, backend::TestBackend, layout::Rect, text::Line};

use super::*;
use crate::{
    history::History,
    model::{Dev, findings::Severity},
    pipeline::{Pipeline, Step},
    view::{Rows, SortKey, disks, disks_in_view, dstate, heatmap, latency, layout, render, status},
};

const SIZES: [(u16, u16); 5] = [(80, 24), (100, 30), (120, 40), (200, 50), (250, 60)];

fn recording(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/recordings")
        .join(format!("{name}.rec"))
}

/// Every interval of a recording, as `--replay` gives them.
fn replay(name: &str) -> Vec<Snapshot> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut pipeline = Pipeline::replay(&[recording(name)], None).unwrap();
        let mut out = Vec::new();
        while let Step::Interval(snap) = pipeline.next().await.unwrap() {
            out.push(*snap);
        }
        out
    })
}

/// Calls `check` with the live view after each interval of a recording, as the run loop
/// feeds it (its history, its kept order); returns how many intervals there were.
fn each_interval(name: &str, ui: UiState, mut check: impl FnMut(usize, &App)) -> usize {
    let mut app = App::new(ui);
    let snaps = replay(name);
    for (i, snap) in snaps.iter().enumerate() {
        app.update(snap.clone());
        check(i, &app);
    }
    snaps.len()
}

fn ui() -> UiState {
    UiState {
        host: "vm".into(),
        kernel: "6.18.44".into(),
        ..UiState::default()
    }
}

fn draw(width: u16, height: u16, snap: &Snapshot, history: &History, ui: &UiState) -> Vec<String> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|frame| render(frame, snap, history, ui, &Theme::default()))
        .unwrap();
    let buffer = terminal.backend().buffer();
    (0..height)
        .map(|y| (0..width).map(|x| buffer[(x, y)].symbol()).collect())
        .collect()
}

/// The text of `rect` on `screen`, row by row.
fn cut(screen: &[String], rect: Rect) -> Vec<String> {
    screen[usize::from(rect.y)..usize::from(rect.y + rect.height)]
        .iter()
        .map(|row| {
            row.chars()
                .skip(usize::from(rect.x))
                .take(usize::from(rect.width))
                .collect()
        })
        .collect()
}

/// Each pane, its place and the lines it laid out for it.
fn laid_out(
    snap: &Snapshot,
    history: &History,
    ui: &UiState,
    area: Rect,
) -> Vec<(&'static str, Rect, Vec<Line<'static>>)> {
    let theme = Theme::default();
    let rows = Rows::new(snap, ui);
    let panes = layout(area, snap, &rows, ui).unwrap();
    let in_view = disks_in_view(snap, ui, area.height);
    let mut out = vec![
        (
            "status",
            panes.status,
            vec![status::line(snap, ui, &theme, usize::from(area.width))],
        ),
        (
            "disks",
            panes.disks,
            disks::lines(snap, history, ui, &theme, panes.disks, &in_view),
        ),
        (
            "procs",
            panes.procs,
            procs::lines(snap, &rows, ui, &theme, panes.procs),
        ),
        (
            "keys",
            panes.keys,
            vec![status::key_line(ui, &theme, usize::from(area.width))],
        ),
    ];
    if panes.findings.height > 0 {
        out.push((
            "findings",
            panes.findings,
            findings::lines(snap, &rows.groups, ui, &theme, panes.findings),
        ));
    }
    if panes.dstate.height > 0 {
        out.push((
            "dstate",
            panes.dstate,
            dstate::lines(snap, &theme, panes.dstate),
        ));
    }
    out.push(if ui.show_heatmap {
        (
            "heatmap",
            panes.latency,
            heatmap::lines(snap, history, &rows, ui, &theme, panes.latency),
        )
    } else {
        (
            "latency",
            panes.latency,
            latency::lines(snap, &rows, ui, &theme, panes.latency),
        )
    });
    out
}

/// What a pane's first row starts with.
fn title_of(pane: &str, ui: &UiState) -> Option<&'static str> {
    let focused = |f: Focus| ui.focus == f;
    match pane {
        "disks" if focused(Focus::Disks) => Some("▸ Disks"),
        "disks" => Some(" Disks"),
        "procs" if focused(Focus::Processes) => Some("▸ Processes"),
        "procs" => Some(" Processes"),
        "findings" if focused(Focus::Findings) => Some("▸ Findings"),
        "findings" => Some(" Findings"),
        "dstate" => Some(" D state"),
        "latency" => Some(" Latency"),
        "heatmap" => Some(" Heat map"),
        _ => None,
    }
}

/// The checks every screen passes; `what` names it in failures.
fn check_screen(what: &str, snap: &Snapshot, history: &History, ui: &UiState, size: (u16, u16)) {
    let (width, height) = size;
    let screen = draw(width, height, snap, history, ui);
    let whole = screen.join("\n");
    let area = Rect::new(0, 0, width, height);
    let panes = laid_out(snap, history, ui, area);
    let mut covered = 0;
    for (name, rect, lines) in &panes {
        covered += rect.height;
        assert!(
            lines.len() <= usize::from(rect.height),
            "{what}: {name} laid out {} lines for {} rows",
            lines.len(),
            rect.height
        );
        for line in lines {
            assert!(
                line.width() <= usize::from(rect.width),
                "{what}: {name} line past the edge ({} > {}): {line}\n{whole}",
                line.width(),
                rect.width
            );
        }
        // The rows on screen are the lines laid out, then blank rows: nothing else drew
        // there, nothing was cut by the screen.
        let rows = cut(&screen, *rect);
        for (i, row) in rows.iter().enumerate() {
            let expected = lines.get(i).map(ToString::to_string).unwrap_or_default();
            assert_eq!(
                row.trim_end(),
                expected.trim_end(),
                "{what}: {name} row {i} is not what it laid out\n{whole}"
            );
        }
        if *name == "latency" {
            // Queue time and device time side by side: the column before the device side
            // is blank on every row, so one side never runs into the other.
            let gap = usize::from(rect.width / 2) - 1;
            for row in rows.iter().skip(1).filter(|r| !r.starts_with("calls ")) {
                assert_eq!(
                    row.chars().nth(gap),
                    Some(' '),
                    "{what}: the latency pane's sides touch: {row:?}\n{whole}"
                );
            }
        }
        if let (Some(title), Some(first)) = (title_of(name, ui), rows.first()) {
            assert!(
                first.starts_with(title),
                "{what}: {name}'s title {title:?} is not whole: {first:?}\n{whole}"
            );
        }
    }
    assert_eq!(covered, height, "{what}: every row belongs to one pane");

    // The focused pane is marked, and only it.
    let marks: Vec<&String> = screen.iter().filter(|l| l.starts_with('▸')).collect();
    assert_eq!(marks.len(), 1, "{what}: one focused pane\n{whole}");
    let procs_title = cut(&screen, panes[2].1)[0].clone();
    // The sort: named in the title; its column marked, or the title says it is hidden.
    assert!(
        procs_title.contains(&format!("by {}", ui.sort.label())),
        "{what}: the sort is not named: {procs_title:?}"
    );
    let shown = procs::sort_keys(width, ui.by_cgroup);
    if ui.sort != SortKey::TotalBytes && !ui.by_cgroup {
        let header = cut(&screen, panes[2].1).get(1).cloned().unwrap_or_default();
        if shown.contains(&ui.sort) {
            assert!(
                header.contains('▼') || header.contains('▲'),
                "{what}: the sort column is not marked: {header:?}"
            );
        } else {
            assert!(
                procs_title.contains("column hidden") || procs_title.contains("its column shows"),
                "{what}: the sort column is off screen and nothing says so: {procs_title:?}"
            );
        }
    }
    // The filter.
    if !ui.filter.is_empty() {
        assert!(
            procs_title.contains("filter \""),
            "{what}: the filter is not visible: {procs_title:?}\n{whole}"
        );
    }
}

/// The states people put the screen in, for a snapshot: `culprit` is a process with a
/// finding, `scheduled` a disk with an I/O scheduler.
fn states(snap: &Snapshot, culprit: Option<u32>, scheduled: Option<Dev>) -> Vec<(String, UiState)> {
    let base = ui();
    let mut out = vec![("default".to_string(), base.clone())];
    out.push((
        "culprit selected".into(),
        UiState {
            selected_pid: culprit,
            ..base.clone()
        },
    ));
    if !snap.findings.is_empty() {
        out.push((
            "findings focused".into(),
            UiState {
                focus: Focus::Findings,
                selected_finding: findings::groups(snap).first().map(|g| g.key.clone()),
                ..base.clone()
            },
        ));
    }
    out.push((
        "disk with a scheduler".into(),
        UiState {
            focus: Focus::Disks,
            selected_disk: scheduled,
            ..base.clone()
        },
    ));
    out.push((
        "filtered".into(),
        UiState {
            filter: "git".into(),
            ..base.clone()
        },
    ));
    out.push((
        "filtered by pids".into(),
        UiState {
            filter: format!("1,{}", culprit.unwrap_or(2)),
            ..base.clone()
        },
    ));
    out.push((
        "filtered by name".into(),
        UiState {
            filter: "kworker".into(),
            ..base.clone()
        },
    ));
    out.push((
        "sorted by sync p99".into(),
        UiState {
            sort: SortKey::SyncP99,
            ..base.clone()
        },
    ));
    out.push((
        "sorted by time in D, reversed".into(),
        UiState {
            sort: SortKey::DState,
            reversed: true,
            ..base.clone()
        },
    ));
    out.push((
        "heat map".into(),
        UiState {
            show_heatmap: true,
            selected_pid: culprit,
            ..base.clone()
        },
    ));
    out.push((
        "by cgroup".into(),
        UiState {
            by_cgroup: true,
            ..base.clone()
        },
    ));
    out.push((
        "workers expanded, totals".into(),
        UiState {
            expand_workers: true,
            cumulative: true,
            ..base.clone()
        },
    ));
    out.push((
        "paused with a caption".into(),
        UiState {
            paused: true,
            caption: Some("demo 2/7 small-sync: 128-byte appends, each fsynced: AMP ~130x, CRIT write_amplification".into()),
            ..base
        },
    ));
    out
}

fn culprit(snap: &Snapshot) -> Option<u32> {
    snap.findings
        .iter()
        .filter(|f| f.active && f.severity >= Severity::Warning)
        .filter_map(|f| f.tgid)
        .find(|pid| snap.procs.iter().any(|p| p.tgid == *pid))
}

fn scheduled(snap: &Snapshot) -> Option<Dev> {
    snap.disks
        .iter()
        .find(|d| d.scheduler.is_some() && d.interval.inserted > 0)
        .map(|d| d.dev)
}

fn sweep(name: &str) {
    let intervals = each_interval(name, ui(), |i, app| {
        let snap = &app.shown;
        for (state, mut ui) in states(snap, culprit(snap), scheduled(snap)) {
            ui.order = app.ui.order.clone();
            for size in SIZES {
                let what = format!("{name} interval {} {state} at {}x{}", i + 1, size.0, size.1);
                check_screen(&what, snap, &app.history, &ui, size);
            }
        }
    });
    assert!(intervals >= 4, "{name}: {intervals} intervals");
}

#[test]
fn every_pane_of_the_git_loop_at_every_size() {
    sweep("git-loop");
}

#[test]
fn every_pane_of_the_incident_at_every_size() {
    sweep("incident");
}

/// The screen of `name`'s interval `at` (1-based) at `size` in `ui`, after the live view
/// saw every interval before it.
fn screen_at(name: &str, at: usize, size: (u16, u16), ui: &UiState) -> Vec<String> {
    let mut screen = Vec::new();
    each_interval(name, ui.clone(), |i, app| {
        if i + 1 == at {
            screen = draw(size.0, size.1, &app.shown, &app.history, &app.ui);
        }
    });
    screen
}

#[test]
fn the_culprit_stays_in_view_at_every_size() {
    for name in ["git-loop", "incident"] {
        let mut seen = 0;
        each_interval(name, ui(), |i, app| {
            let snap = &app.shown;
            let Some(pid) = culprit(snap) else {
                return;
            };
            seen += 1;
            for size in SIZES {
                let screen = draw(size.0, size.1, snap, &app.history, &app.ui);
                let rows = Rows::new(snap, &app.ui);
                let procs = layout(Rect::new(0, 0, size.0, size.1), snap, &rows, &app.ui)
                    .unwrap()
                    .procs;
                let rows = cut(&screen, procs);
                assert!(
                    rows.iter()
                        .any(|r| r.starts_with(&format!(" {pid} ")) && r.contains('‼')),
                    "{name} interval {}: {pid} with its finding not in view at {size:?}:\n{}",
                    i + 1,
                    screen.join("\n")
                );
            }
        });
        assert!(seen >= 3, "{name}: a culprit in {seen} intervals");
    }
}

#[test]
fn kernel_workers_fold_into_one_row_and_x_expands_them() {
    let folded = screen_at("git-loop", 3, (80, 24), &ui());
    let text = folded.join("\n");
    let row = folded
        .iter()
        .find(|r| r.contains("kworker ×"))
        .unwrap_or_else(|| panic!("no folded row:\n{text}"));
    assert!(row.starts_with(" -       kworker ×"), "{row}");
    assert!(!text.contains("kworker/u"), "{text}");
    let expanded = screen_at(
        "git-loop",
        3,
        (120, 40),
        &UiState {
            expand_workers: true,
            ..ui()
        },
    )
    .join("\n");
    assert!(
        expanded.contains("kworker/u") && !expanded.contains("kworker ×"),
        "{expanded}"
    );
}

#[test]
fn the_folded_row_sums_its_members() {
    let mut folds = 0;
    each_interval("git-loop", ui(), |_, app| {
        let snap = &app.shown;
        let rows = procs::entries(snap, &app.ui);
        let Some(fold) = rows.iter().find(|e| e.folded > 0) else {
            return;
        };
        folds += 1;
        let members: Vec<&crate::model::ProcRow> = snap
            .procs
            .iter()
            .filter(|p| procs::worker_kind(p).is_some() && p.interval.active())
            .collect();
        assert_eq!(fold.folded, members.len());
        let sum = |f: fn(&crate::model::ProcFigures) -> u64| {
            members.iter().map(|p| f(&p.interval)).sum::<u64>()
        };
        assert_eq!(fold.row.interval.writes, sum(|f| f.writes));
        assert_eq!(fold.row.interval.write_bytes, sum(|f| f.write_bytes));
        assert_eq!(
            fold.row.interval.total_hist.total(),
            sum(|f| f.total_hist.total())
        );
        assert_eq!(fold.row.comm, format!("kworker ×{}", members.len()));
    });
    assert!(folds >= 3, "kworkers folded in {folds} intervals");
}

#[test]
fn idle_disks_hide_when_space_is_short_and_say_so() {
    // loop1 and loop2 were written in the first interval only.
    let short = screen_at("git-loop", 3, (80, 24), &ui()).join("\n");
    assert!(short.contains(" Disks · +2 idle ─"), "{short}");
    assert!(
        !short.contains(" loop1 ") && !short.contains(" loop2 "),
        "{short}"
    );
    let tall = screen_at("git-loop", 3, (120, 40), &ui()).join("\n");
    assert!(
        tall.contains(" loop1 ") && tall.contains(" loop2 "),
        "{tall}"
    );
    assert!(!tall.contains("idle"), "{tall}");
    // The first interval: all busy, all shown.
    let first = screen_at("git-loop", 1, (80, 24), &ui()).join("\n");
    assert!(
        first.contains(" loop2 ") && !first.contains("idle"),
        "{first}"
    );
}

#[test]
fn the_scheduler_line_stays_in_its_half() {
    let scheduled_ui = |snap: &Snapshot| UiState {
        focus: Focus::Disks,
        selected_disk: scheduled(snap),
        ..ui()
    };
    each_interval("incident", ui(), |i, app| {
        let ui = scheduled_ui(&app.shown);
        assert!(ui.selected_disk.is_some(), "loop0 has mq-deadline");
        for (width, height) in [(80, 24), (100, 30)] {
            let screen = draw(width, height, &app.shown, &app.history, &ui);
            let line = screen
                .iter()
                .find(|l| l.starts_with("mq-deadline G2I "))
                .unwrap_or_else(|| panic!("{}", screen.join("\n")));
            let (left, right) = line.split_at(
                line.char_indices()
                    .nth(usize::from(width / 2))
                    .map_or(line.len(), |(at, _)| at),
            );
            assert!(
                left.trim_end().ends_with("%)") && left.ends_with(' '),
                "interval {}: {line:?}",
                i + 1
            );
            assert!(right.starts_with("(D2C)"), "{line:?}");
        }
    });
}
