//! Render tests: the whole screen at the sizes people use, as text snapshots.

use ratatui::{Terminal, backend::TestBackend};

use super::*;
use crate::{
    history::fixtures::{INTERVALS, demo_history},
    model::{Dev, fixtures::demo_snapshot},
};

// Named for their panes, not as the view's modules they test: a `disks` here would hide
// `super::disks` from these tests.
mod disks_pane;
mod findings_pane;
mod host_line;
mod latency_pane;
mod processes_pane;

pub(crate) fn ui() -> UiState {
    UiState {
        host: "db01".into(),
        kernel: "6.18.44".into(),
        ..UiState::default()
    }
}

fn draw(width: u16, height: u16, snap: &Snapshot, ui: &UiState) -> Terminal<TestBackend> {
    draw_with(width, height, snap, &History::default(), ui)
}

pub(crate) fn draw_with(
    width: u16,
    height: u16,
    snap: &Snapshot,
    history: &History,
    ui: &UiState,
) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|frame| render(frame, snap, history, ui, &Theme::default()))
        .unwrap();
    terminal
}

pub(crate) fn text(terminal: &Terminal<TestBackend>) -> String {
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
fn drill_down_names_every_kind_of_sync_and_fua_120x40() {
    let mut ui = ui();
    ui.selected_pid = Some(6100);
    ui.show_detail = true;
    let screen = text(&draw(
        120,
        40,
        &crate::model::fixtures::sync_kinds_snapshot(),
        &ui,
    ));
    for expected in [
        "120 O_DSYNC write, 60 io_uring fsync",
        "io_uring syncs 60 calls, payload not measured",
        "FUA   4 writes made durable by the device on their own (nvme0n1 honours FUA)",
        "O_DSYNC write ",
        "io_uring fsync ",
        "128 B O_DSYNC writes",
    ] {
        assert!(screen.contains(expected), "{expected:?} missing:\n{screen}");
    }
    insta::assert_snapshot!(screen);
}

fn history_ui() -> UiState {
    UiState {
        // 2026-11-22T00:00:00Z: past intervals have a readable time of day.
        started_unix_ms: 1_795_305_600_000,
        ..ui()
    }
}

#[test]
fn heat_map_of_a_disk_80x24() {
    let history = demo_history();
    let snap = history.snapshot(INTERVALS).unwrap().clone();
    let mut ui = history_ui();
    ui.show_heatmap = true;
    ui.focus = Focus::Disks;
    ui.selected_disk = Some(Dev::new(7, 0));
    let screen = text(&draw_with(80, 24, &snap, &history, &ui));
    assert!(screen.contains("Heat map disk loop0"), "{screen}");
    assert!(screen.contains('█') && screen.contains('░'), "{screen}");
    insta::assert_snapshot!(screen);
}

#[test]
fn heat_map_of_a_process_sync_latency_120x40() {
    let history = demo_history();
    let snap = history.snapshot(INTERVALS).unwrap().clone();
    let mut ui = history_ui();
    ui.show_heatmap = true;
    ui.heat_kind = HeatKind::Sync;
    ui.selected_pid = Some(5689);
    let screen = text(&draw_with(120, 40, &snap, &history, &ui));
    assert!(
        screen.contains("Heat map pid 5689 lab001: sync call latency"),
        "{screen}"
    );
    insta::assert_snapshot!(screen);
}

#[test]
fn paused_in_the_past_80x24() {
    let history = demo_history();
    let snap = history.snapshot(45).unwrap().clone();
    let mut ui = history_ui();
    ui.paused = true;
    ui.back = INTERVALS - 45;
    ui.focus = Focus::Disks;
    ui.selected_disk = Some(Dev::new(7, 0));
    let screen = text(&draw_with(80, 24, &snap, &history, &ui));
    assert!(screen.contains("[PAUSED 00:00:45Z -45s]"), "{screen}");
    // The host header is that interval's too (the spike), not the newest one's.
    let top = screen.lines().next().unwrap();
    assert!(top.contains("b4 wa 38% psi 42/22"), "{top}");
    insta::assert_snapshot!(screen);
}

#[test]
fn paused_in_the_past_with_the_heat_map_120x40() {
    let history = demo_history();
    let snap = history.snapshot(45).unwrap().clone();
    let mut ui = history_ui();
    ui.paused = true;
    ui.back = INTERVALS - 45;
    ui.show_heatmap = true;
    ui.focus = Focus::Disks;
    ui.selected_disk = Some(Dev::new(7, 0));
    let screen = text(&draw_with(120, 40, &snap, &history, &ui));
    assert!(screen.contains("[PAUSED 00:00:45Z -45s]"), "{screen}");
    insta::assert_snapshot!(screen);
}

#[test]
fn wide_disks_pane_has_sparklines_160x40() {
    let history = demo_history();
    let snap = history.snapshot(INTERVALS).unwrap().clone();
    let screen = text(&draw_with(160, 40, &snap, &history, &history_ui()));
    let loop0 = screen.lines().find(|l| l.starts_with(" loop0")).unwrap();
    assert!(screen.contains("IOPS trend"), "{screen}");
    assert!(loop0.contains('█') && loop0.contains('▁'), "{loop0}");
    insta::assert_snapshot!(screen);
}

#[test]
fn processes_grouped_by_cgroup_120x40() {
    let snap = demo_snapshot();
    let mut ui = ui();
    ui.by_cgroup = true;
    let screen = text(&draw(120, 40, &snap, &ui));
    assert!(
        screen.contains("PROCS") && screen.contains("CGROUP"),
        "{screen}"
    );
    assert!(screen.contains("postgresql.service"), "{screen}");
    assert!(screen.contains("(unknown)"), "{screen}");
}

#[test]
fn throttled_calls_and_dirty_pauses_142x40() {
    let snap = crate::model::fixtures::throttled_snapshot();
    let mut ui = ui();
    ui.selected_pid = Some(4321);
    let screen = text(&draw(142, 40, &snap, &ui));
    for header in ["C.p99", "PREQ", "PAUSE", "kworker/u8:2"] {
        assert!(screen.contains(header), "{header} in\n{screen}");
    }
    insta::assert_snapshot!(screen);
}

#[test]
fn throttled_drill_down_120x40() {
    let snap = crate::model::fixtures::throttled_snapshot();
    let mut ui = ui();
    ui.selected_pid = Some(4321);
    ui.show_detail = true;
    insta::assert_snapshot!(text(&draw(120, 40, &snap, &ui)));
}

#[test]
fn dirty_pauses_in_the_drill_down_80x24() {
    let snap = crate::model::fixtures::throttled_snapshot();
    let mut ui = ui();
    ui.selected_pid = Some(5150);
    ui.show_detail = true;
    let screen = text(&draw(80, 24, &snap, &ui));
    assert!(screen.contains("DIRTY"), "{screen}");
    insta::assert_snapshot!(screen);
}

/// An incident's findings, six lines' worth: lab001's small fsyncs and make stuck in D (as in
/// the demo), fio's tail writes, rsync's sync storm (INFO), a loop of git processes that all
/// exited (one ended CRIT over three pids and one pack file, to fold) and sysbench's empty
/// syncs (ended). None of the git pids has a row: they exited.
fn incident_snapshot() -> Snapshot {
    use crate::model::findings::{FindingKind, Severity};
    let mut snap = demo_snapshot();
    let template = snap
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::WriteAmplification)
        .unwrap()
        .clone();
    let now = snap.now_ns;
    let make = |kind, severity, tgid: u32, comm: &str, file: &str, ago_s: u64, numbers: &str| {
        let mut f = template.clone();
        f.kind = kind;
        f.severity = severity;
        f.tgid = Some(tgid);
        f.comm = comm.into();
        f.files = vec![file.to_string()];
        f.summary = format!("{comm} (pid {tgid}): {numbers}; file {file}");
        f.active = ago_s == 0;
        f.last_seen_ns = now - ago_s * 1_000_000_000;
        f.first_seen_ns = f.last_seen_ns.min(f.first_seen_ns);
        f
    };
    let pack = "/home/ana/src/linux/.git/objects/pack/tmp_pack_Ab12Cd";
    let mut findings = vec![];
    for f in &mut snap.findings {
        if f.tgid == Some(5689) {
            f.files = vec!["/srv/lab/lab001.data".into()];
        }
        findings.push(f.clone());
    }
    findings.extend([
        make(
            FindingKind::SubBlockTailWrite,
            Severity::Warning,
            6001,
            "fio",
            "/mnt/nvme/fio/dio-tail-job.0.0",
            0,
            "O_DIRECT writes extending the file end off a 4096-byte block: 20 extra 512-byte writes",
        ),
        make(
            FindingKind::SyncStorm,
            Severity::Info,
            6002,
            "rsync",
            "/backup/home/ana/photos/2026/IMG_2041.jpg",
            0,
            "212 fsyncs in 1.0s, each 4 KiB; 38% of that time waiting in them (p99 2.1ms)",
        ),
        make(
            FindingKind::EmptySyncs,
            Severity::Warning,
            6003,
            "sysbench",
            "/var/lib/sysbench/test_file.3",
            6,
            "3 of 4 fsyncs had nothing to make durable, yet each flushed the disk's cache",
        ),
    ]);
    for (pid, ago) in [(5104, 5), (5162, 4), (5165, 3)] {
        findings.push(make(
            FindingKind::WriteAmplification,
            Severity::Critical,
            pid,
            "git",
            pack,
            ago,
            "84x write amplification, fsync after 1.5 KiB writes: 96 of 96 fsyncs made 1.5 KiB durable",
        ));
    }
    snap.findings = findings;
    snap
}

const SIZES: [(u16, u16); 4] = [(80, 24), (100, 30), (120, 40), (200, 50)];

fn git_key(snap: &Snapshot) -> findings::GroupKey {
    findings::groups(snap)
        .into_iter()
        .find(|g| g.key.who == "git")
        .unwrap()
        .key
}

/// The file's own name: the part a finding's line must keep.
fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[test]
fn findings_pane_focused_at_every_size() {
    let snap = incident_snapshot();
    let groups = findings::groups(&snap);
    assert_eq!(groups.len(), 6, "three git pids fold into one line");
    let mut ui = ui();
    ui.focus = Focus::Findings;
    ui.selected_finding = Some(git_key(&snap));
    for (width, height) in SIZES {
        let screen = text(&draw(width, height, &snap, &ui));
        let rows: Vec<&str> = screen.lines().collect();
        let title = rows
            .iter()
            .position(|l| l.starts_with("▸ Findings: 4 active, 2 ended"))
            .unwrap_or_else(|| panic!("{width}x{height}: no focused title:\n{screen}"));
        // The pane's lines: after its title, each a mark (`▶` or a space) and a severity.
        let shown: Vec<&str> = rows[title + 1..]
            .iter()
            .take_while(|l| {
                l.strip_prefix('▶')
                    .or_else(|| l.strip_prefix(' '))
                    .is_some_and(|r| {
                        ["‼ CRIT ", "! WARN ", "i INFO "]
                            .iter()
                            .any(|p| r.starts_with(p))
                    })
            })
            .copied()
            .collect();
        assert!(!shown.is_empty(), "{width}x{height}:\n{screen}");
        let hidden = groups.len() - shown.len();
        assert_eq!(
            rows[title].contains(&format!("+{hidden} more")),
            hidden > 0,
            "{width}x{height}: {hidden} hidden:\n{screen}"
        );
        assert!(
            shown
                .iter()
                .any(|l| l.starts_with("▶‼ CRIT write_amplification git ×3 pids")),
            "{width}x{height}: the selection is in view and marked:\n{screen}"
        );
        // Each line is exactly what the pane laid out for it: nothing drew over it, it
        // was not cut by the screen's edge, and its file's name is on it.
        for line in &shown {
            let group = groups
                .iter()
                .find(|g| line.contains(&format!(" {} ", findings::who(g))))
                .unwrap_or_else(|| panic!("{width}x{height}: whose line is {line:?}?"));
            let laid_out = findings::line(
                group,
                snap.now_ns,
                usize::from(width) - 1,
                &Theme::default(),
            )
            .to_string();
            assert_eq!(
                line.chars().skip(1).collect::<String>().trim_end(),
                laid_out.trim_end(),
                "{width}x{height}"
            );
            if let Some(file) = group.key.file.as_deref() {
                assert!(
                    line.contains(basename(file)),
                    "{width}x{height}: {file} missing in {line:?}"
                );
            }
        }
        insta::assert_snapshot!(format!("findings_pane_focused_{width}x{height}"), screen);
    }
}

#[test]
fn finding_text_at_every_size() {
    let snap = incident_snapshot();
    let mut ui = ui();
    ui.focus = Focus::Findings;
    ui.selected_finding = Some(git_key(&snap));
    ui.show_finding = true;
    let git = snap.findings.iter().find(|f| f.comm == "git").unwrap();
    assert!(
        !snap.procs.iter().any(|p| p.comm == "git"),
        "the git processes have no rows: they exited"
    );
    let first_words = |text: &str| {
        text.split_whitespace()
            .take(4)
            .collect::<Vec<_>>()
            .join(" ")
    };
    for (width, height) in SIZES {
        let screen = text(&draw(width, height, &snap, &ui));
        for expected in [
            "‼ CRIT write_amplification git ×3 pids — ended".to_string(),
            "who      git pids 5104, 5162, 5165".to_string(),
            format!("file     {}", git.files[0]),
            format!("why      {}", first_words(&git.why)),
            format!("fix      {}", first_words(&git.fix)),
            "seen     ended 3s ago".to_string(),
        ] {
            assert!(
                screen.contains(&expected),
                "{width}x{height}: {expected:?} missing:\n{screen}"
            );
        }
        // The overlay's frame is whole on every row: no text ran over its borders.
        let rows: Vec<&str> = screen.lines().collect();
        for row in &rows[1..rows.len() - 1] {
            let first = row.chars().next().unwrap();
            let last = row.chars().last().unwrap();
            assert!(
                matches!((first, last), ('┌', '┐') | ('│', '│') | ('└', '┘')),
                "{width}x{height}: {row:?}"
            );
        }
        insta::assert_snapshot!(format!("finding_text_{width}x{height}"), screen);
    }
}

/// The demo with loop0's interval latencies set: queue time 1-4 us, device time spread over
/// `device` (slot, count) pairs.
fn latency_spread(device: &[(usize, u64)]) -> (Snapshot, UiState) {
    let mut snap = demo_snapshot();
    let loop0 = snap
        .disks
        .iter_mut()
        .find(|d| d.dev == Dev::new(7, 0))
        .unwrap();
    let mut queue = crate::model::Log2Hist::default();
    queue.slots[1] = 900;
    queue.slots[2] = 100;
    let mut dev = crate::model::Log2Hist::default();
    for &(slot, n) in device {
        dev.slots[slot] = n;
    }
    loop0.interval.queue_hist = queue;
    loop0.interval.device_hist = dev;
    let mut ui = ui();
    ui.focus = Focus::Disks;
    ui.selected_disk = Some(Dev::new(7, 0));
    (snap, ui)
}

/// 10 us (slot 4) to 2 ms (slot 11).
const TEN_US_TO_TWO_MS: [(usize, u64); 8] = [
    (4, 100),
    (5, 300),
    (6, 500),
    (7, 400),
    (8, 300),
    (9, 200),
    (10, 100),
    (11, 50),
];

/// The device side's bar rows of the latency pane: (label, count).
fn device_rows(screen: &str) -> Vec<(String, u64)> {
    let mut rows = Vec::new();
    let mut in_pane = false;
    for line in screen.lines() {
        if line.contains(" Latency disk loop0") {
            in_pane = true;
            continue;
        }
        if !in_pane {
            continue;
        }
        let right: String = line.chars().skip(line.chars().count() / 2).collect();
        let mut words = right.split_whitespace();
        if let (Some(label), Some(n)) = (words.next(), words.next())
            && let Ok(n) = n.parse::<u64>()
        {
            rows.push((label.to_string(), n));
        }
    }
    rows
}

/// The 10 us-2 ms spread at `width`x`height`: at least `rows` non-empty device rows, every
/// request counted once.
fn ten_us_to_two_ms_reads(width: u16, height: u16, rows: usize) -> String {
    let (snap, ui) = latency_spread(&TEN_US_TO_TWO_MS);
    let screen = text(&draw(width, height, &snap, &ui));
    let counted = device_rows(&screen);
    let filled = counted.iter().filter(|(_, n)| *n > 0).count();
    assert!(filled >= rows, "{counted:?}\n{screen}");
    assert_eq!(
        counted.iter().map(|(_, n)| n).sum::<u64>(),
        1950,
        "{screen}"
    );
    screen
}

#[test]
fn a_latency_range_of_ten_microseconds_to_two_milliseconds_reads_at_80x24() {
    insta::assert_snapshot!(ten_us_to_two_ms_reads(80, 24, 4));
}

#[test]
fn a_latency_range_of_ten_microseconds_to_two_milliseconds_reads_at_120x40() {
    // Tall enough for one row a slot.
    insta::assert_snapshot!(ten_us_to_two_ms_reads(120, 40, 8));
}
