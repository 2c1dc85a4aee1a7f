//! The live view in a real terminal (tmux): it draws, answers keys, and always gives the
//! terminal back: on `q` and on SIGTERM, SIGINT and SIGHUP.

use std::process::Command;

use iotop_bpf_integration::{binary, require_root, tmux::Tmux};

fn session(name: &str) -> Tmux {
    let tmux = Tmux::start(
        name,
        &format!("{} -d 0.5; echo EXIT=$?; sleep 120", binary().display()),
    );
    // The key line is drawn last: a capture taken while the first frame is still being
    // written may hold the panes above it only (it failed so once).
    let screen = tmux.wait_for("q quit");
    for pane in ["Disks", "Processes", "Latency"] {
        assert!(screen.contains(pane), "{pane} missing at 80x24:\n{screen}");
    }
    assert!(tmux.alternate_screen());
    tmux
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn keys_work_and_q_restores_the_terminal() {
    if !require_root("keys_work_and_q_restores_the_terminal") {
        return;
    }
    let tmux = session("keys");
    tmux.keys("?");
    tmux.wait_for("iotop-bpf keys");
    tmux.keys("Escape");
    // An Escape followed at once by a space reads as Alt+Space (as it would from a person
    // typing that fast): wait for the help to close first.
    tmux.wait_for_gone("iotop-bpf keys");
    tmux.keys("space");
    tmux.wait_for("[PAUSED ");
    tmux.keys("c");
    tmux.wait_for("[TOTALS]");
    tmux.keys("q");
    let screen = tmux.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(
        !tmux.alternate_screen(),
        "still on the alternate screen after q"
    );
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn signals_restore_the_terminal() {
    if !require_root("signals_restore_the_terminal") {
        return;
    }
    for (name, signal) in [
        ("term", libc::SIGTERM),
        ("int", libc::SIGINT),
        ("hup", libc::SIGHUP),
    ] {
        let tmux = session(name);
        // SAFETY: kill with a pid we just found and a valid signal.
        unsafe { libc::kill(tmux.tool_pid(), signal) };
        let screen = tmux.wait_for("EXIT=");
        assert!(screen.contains("EXIT=0"), "SIG{name}: {screen}");
        assert!(
            !tmux.alternate_screen(),
            "SIG{name}: still on the alternate screen"
        );
        assert!(!screen.contains("panicked"), "{screen}");
    }
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_recording_replays_in_the_live_view() {
    if !require_root("a_recording_replays_in_the_live_view") {
        return;
    }
    let recording =
        std::env::temp_dir().join(format!("iotop-bpf-view-{}.ndjson", std::process::id()));
    let record = Command::new(binary())
        .args(["--json", "-d", "0.3", "-n", "4", "--record"])
        .arg(&recording)
        .output()
        .unwrap();
    assert!(
        record.status.success(),
        "{}",
        String::from_utf8_lossy(&record.stderr)
    );
    let tmux = Tmux::start(
        "replay",
        &format!(
            "{} --replay {} --speed 4; echo EXIT=$?; sleep 120",
            binary().display(),
            recording.display()
        ),
    );
    let screen = tmux.wait_for("end of the recording");
    assert!(
        screen.contains("Processes") && screen.contains("Latency"),
        "{screen}"
    );
    tmux.keys("q");
    let screen = tmux.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(!tmux.alternate_screen());
    let _ = std::fs::remove_file(recording);
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn w_saves_the_screen_and_shows_where() {
    if !require_root("w_saves_the_screen_and_shows_where") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("iotop-bpf-w-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tmux = Tmux::start(
        "capture",
        &format!(
            "cd {} && {} -d 0.5; echo EXIT=$?; sleep 120",
            dir.display(),
            binary().display()
        ),
    );
    tmux.wait_for("Latency");
    tmux.keys("w");
    let screen = tmux.wait_for("saved ");
    let shown = screen
        .lines()
        .find_map(|l| l.split("saved ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{screen}"))
        .to_string();
    assert!(shown.starts_with("./iotop-bpf-"), "{screen}");
    let text = dir.join(shown.trim_start_matches("./"));
    let saved = std::fs::read_to_string(&text).unwrap();
    assert!(
        saved.contains("Processes") && saved.contains("PID     COMM"),
        "the process table is in the capture:\n{saved}"
    );
    assert_eq!(saved.lines().count(), 24, "the whole 80x24 screen");
    let md = std::fs::read_to_string(text.with_extension("md")).unwrap();
    assert!(md.contains("## Findings") && md.contains("```"), "{md}");
    for path in [&text, &text.with_extension("md")] {
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{}", path.display());
    }
    tmux.keys("q");
    let screen = tmux.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A probe the kernel refused is said on the status line.
#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_refused_probe_is_said_on_the_status_line() {
    if !require_root("a_refused_probe_is_said_on_the_status_line") {
        return;
    }
    let tmux = Tmux::start(
        "refused",
        &format!("IOTOP_BPF_FAULT=reject-dstate {}", binary().display()),
    );
    let screen = tmux.wait_for("degraded: the D-state pane is off");
    assert!(
        screen.contains("degraded: the D-state pane is off: dstate_switch_raw"),
        "{screen}"
    );
    tmux.keys("q");
}

/// Issue 19's incident at 80x24: a real program that syncs every small write (dd with
/// `oflag=dsync`, 128-byte records: lab001's pattern without our reproducer) shows on the
/// screen, named with its file, within 5 s and without a key; after it exited, its finding
/// still opens from the findings pane, fix included.
#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn the_culprit_shows_with_its_file_and_its_fix_opens_after_it_exits() {
    if !require_root("the_culprit_shows_with_its_file_and_its_fix_opens_after_it_exits") {
        return;
    }
    let fs = iotop_bpf_integration::LoopFs::new("ext4", 256);
    let tmux = session("culprit");
    let log = fs.path("journal.log");
    let started = std::time::Instant::now();
    // Killed after 4 s: an exit in the middle, as an incident's culprit is often stopped.
    let mut dd = Command::new("timeout")
        .args([
            "4",
            "dd",
            "if=/dev/zero",
            "bs=128",
            "count=10000000",
            "oflag=dsync",
        ])
        .arg(format!("of={}", log.display()))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run dd");
    let deadline = started + std::time::Duration::from_secs(5);
    let shown = loop {
        let screen = tmux.screen();
        if screen.contains("write_amplification") && screen.contains("journal.log") {
            break screen;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no finding naming journal.log within 5 s:\n{screen}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    eprintln!("shown {:?} after dd started:\n{shown}", started.elapsed());
    assert!(shown.contains("dd"), "{shown}");
    let _ = dd.wait();
    // Its row has gone quiet; the finding stays listed and opens.
    std::thread::sleep(std::time::Duration::from_secs(2));
    tmux.keys("Tab");
    tmux.wait_for("▸ Findings");
    tmux.keys("Enter");
    let text = tmux.wait_for("fix");
    assert!(text.contains("journal.log"), "{text}");
    assert!(text.contains("write_amplification"), "{text}");
    tmux.keys("q");
}
