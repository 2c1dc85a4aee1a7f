//! The top line's host figures: what fits at 80 columns, and only what is known.

use super::*;

fn top_line(width: u16, snap: &Snapshot, ui: &UiState) -> String {
    text(&draw(width, 24, snap, ui))
        .lines()
        .next()
        .unwrap()
        .trim_end()
        .to_string()
}

#[test]
fn the_host_header_fits_at_80_columns_beside_the_tools_cost_and_warnings() {
    let mut snap = demo_snapshot();
    // What a live run adds: BPF cost, own CPU, and dropped records (a warning).
    snap.events.bpf_cpu_pct = Some(1.3);
    snap.events.bpf_ns_per_io = Some(1036);
    snap.events.cpu_pct = Some(2.5);
    snap.events.dropped = 5;
    let top = top_line(80, &snap, &ui());
    assert!(
        top.ends_with("ld 2.1 r3 b1 wa 4% psi 12/3 dirty 40M"),
        "the header is whole, not cut: {top:?}"
    );
    assert!(
        top.contains("dropped 5") && top.contains("D:2"),
        "warnings stay: {top:?}"
    );
    assert!(
        !top.contains("6.18.44"),
        "the kernel release goes first: {top:?}"
    );
    // With room, nothing goes.
    let wide = top_line(200, &snap, &ui());
    for part in [
        "6.18.44",
        "up 0:00:07",
        "bpf 1.3% 1036ns/io",
        "cpu 2.5%",
        "every 7.0s",
    ] {
        assert!(
            wide.contains(part),
            "{part} missing at 200 columns: {wide:?}"
        );
    }
    assert!(
        wide.ends_with(
            "load 2.10 1.50 0.80 run 3 blk 1 iowait 4.0% psi 12.34/3.02 dirty 40M wb 2.0M"
        ),
        "{wide:?}"
    );
}

#[test]
fn a_replay_without_host_figures_shows_none_and_leaves_the_line_as_it_was() {
    let mut snap = demo_snapshot();
    snap.host = crate::model::HostFigures::default();
    assert_eq!(
        top_line(80, &snap, &ui()),
        "iotop-bpf db01 6.18.44 up 0:00:07 220 ev/s dropped 0 every 7.0s D:2"
    );
}

#[test]
fn only_known_host_figures_are_shown() {
    let mut snap = demo_snapshot();
    // A kernel without PSI, on the first interval of a run without a baseline.
    snap.host.psi_io_some_avg10 = None;
    snap.host.psi_io_full_avg10 = None;
    snap.host.iowait_pct = None;
    snap.host.writeback_bytes = None;
    let top = top_line(80, &snap, &ui());
    assert!(top.ends_with("D:2 ld 2.1 r3 b1 dirty 40M"), "{top:?}");
    let wide = top_line(200, &snap, &ui());
    assert!(
        wide.ends_with("load 2.10 1.50 0.80 run 3 blk 1 dirty 40M"),
        "{wide:?}"
    );
}

/// The recording's state: `[REC]` while it keeps everything, what it lost, and once it
/// stopped, `[REC STOPPED]` with why on the key line, at 80 columns beside the rest.
#[test]
fn the_recording_says_whether_it_still_records_and_why_not() {
    let snap = demo_snapshot();
    let mut ui = ui();
    ui.recording = Some(Rec::On { dropped: 0 });
    assert!(top_line(80, &snap, &ui).contains(" [REC] "));
    ui.recording = Some(Rec::On { dropped: 1234 });
    assert!(top_line(80, &snap, &ui).contains("[REC, 1234 lost]"));
    ui.recording = Some(Rec::Stopped(
        "stopped at 2026-11-22T00:00:07.000Z, write /x.rec: No space left on device".into(),
    ));
    let screen = text(&draw(100, 24, &snap, &ui));
    let first = screen.lines().next().unwrap();
    assert!(first.contains("[REC STOPPED]"), "{first}");
    let keys = screen.lines().last().unwrap();
    assert!(
        keys.starts_with("recording stopped at 2026-11-22T00:00:07.000Z, write /x.rec: No space"),
        "{keys}"
    );
}
