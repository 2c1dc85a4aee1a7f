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

/// A noisy neighbour and a read amplification, as the model words them (texts of real runs),
/// at the smallest screen: the line, then the finding's text with its fix.
#[test]
fn the_neighbour_and_the_reads_read_at_80x24_with_their_fix() {
    use crate::model::findings::{FindingKind, Severity};
    let mut snap = demo_snapshot();
    let template = snap.findings[0].clone();
    let mut neighbour = template.clone();
    neighbour.kind = FindingKind::NoisyNeighbour;
    neighbour.severity = Severity::Critical;
    neighbour.tgid = Some(4242);
    neighbour.comm = "python3".into();
    neighbour.files = vec!["/srv/db/system.journal".into()];
    neighbour.summary = "python3 (pid 4242) waits behind fio (pid 5151) on loop0: sync p50 \
        11.2ms, 25x its 452us baseline; fio holds 97% of loop0's busy time (410 MiB/s written)"
        .into();
    neighbour.why = "fio's requests hold the disk: python3's wait in its queue behind them, \
        and each of its flushes waits for their writes in the device's cache"
        .into();
    neighbour.fix = "throttle or re-prioritise fio (pid 5151): cgroup v2 io.max (a wbps/wiops \
        limit on loop0) or a lower io.weight, or ionice -c3 under the BFQ scheduler; or move \
        one of them to another disk"
        .into();
    let mut reads = template;
    reads.kind = FindingKind::ReadAmplification;
    reads.severity = Severity::Critical;
    reads.tgid = Some(4343);
    reads.comm = "python3".into();
    reads.files = vec!["/srv/idx/index.dat".into()];
    reads.summary = "python3 (pid 4343): 31x read amplification, 2999 page faults asked \
        11.7 MiB, the device read 364 MiB in ~124 KiB readahead reads"
        .into();
    reads.fix = "madvise(MADV_RANDOM) on the mapping (LMDB: MDB_NORDAHEAD, readahead=False), \
        or lower the device's read_ahead_kb; O_DIRECT where the program keeps a cache of its own"
        .into();
    snap.findings = vec![neighbour.clone(), reads.clone()];
    let mut ui = ui();
    ui.focus = Focus::Findings;
    let screen = text(&draw(80, 24, &snap, &ui));
    assert!(
        screen.contains("‼ CRIT noisy_neighbour python3 pid 4242"),
        "{screen}"
    );
    assert!(
        screen.contains("‼ CRIT read_amplification python3 pid 4343"),
        "{screen}"
    );
    for (finding, fix_start) in [
        (&neighbour, "fix      throttle or re-prioritise fio"),
        (&reads, "fix      madvise(MADV_RANDOM) on the mapping"),
    ] {
        ui.selected_finding = Some(crate::view::findings::GroupKey::of(finding));
        ui.show_finding = true;
        let screen = text(&draw(80, 24, &snap, &ui));
        assert!(screen.contains(fix_start), "{screen}");
        assert!(screen.contains("file     /srv/"), "{screen}");
    }
}

/// A victim stalled behind a buffered writer's write-back, as the model words it (the text
/// of a real run, `noisy-neighbour-buffered`), at the smallest screen: the line says who
/// waits, and the finding opens on behind whom and the fix that reaches write-back.
#[test]
fn a_stall_behind_write_back_reads_at_80x24_with_its_fix() {
    use crate::model::findings::{FindingKind, Severity};
    let mut snap = demo_snapshot();
    let mut stall = snap.findings[0].clone();
    stall.kind = FindingKind::NoisyNeighbour;
    stall.severity = Severity::Warning;
    stall.tgid = Some(2993);
    stall.comm = "python3".into();
    stall.files = vec!["/srv/log/system.journal".into()];
    stall.summary = "python3 (pid 2993), syncing /srv/log/system.journal, waits behind dd \
        (pid 3035) on loop0: one call blocked 1.79s so far, against its 158us baseline; dd \
        holds 100% of loop0's busy time (370.3 MiB/s written back)"
        .into();
    stall.why = "dd's pages, written back by the kernel's flushers, hold the disk: python3's \
        wait in its queue behind them, and each of its flushes waits for their writes in the \
        device's cache"
        .into();
    stall.fix = "throttle dd (pid 3035): cgroup v2 io.max (a wbps limit on loop0, which its \
        write-back obeys) or a lower io.weight; or make write-back start sooner and smaller \
        (vm.dirty_background_bytes); or move one of them to another disk"
        .into();
    snap.findings = vec![stall.clone()];
    let mut ui = ui();
    ui.focus = Focus::Findings;
    let screen = text(&draw(80, 24, &snap, &ui));
    assert!(
        screen.contains("! WARN noisy_neighbour python3 pid 2993"),
        "{screen}"
    );
    ui.selected_finding = Some(crate::view::findings::GroupKey::of(&stall));
    ui.show_finding = true;
    let screen = text(&draw(80, 24, &snap, &ui));
    assert!(
        screen.contains("fix      throttle dd (pid 3035)"),
        "{screen}"
    );
    assert!(screen.contains("waits behind dd"), "{screen}");
    assert!(screen.contains("blocked 1.79s so far"), "{screen}");
}
