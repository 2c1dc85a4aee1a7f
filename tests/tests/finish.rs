//! Every front end finishes the pipeline however it stops: the last, partial interval is
//! closed with the final sample and recorded, on `q` as on a signal (`--batch` always did;
//! the live view and `serve` used to stop without it).

use std::process::Command;

use iotop_bpf_integration::{binary, require_root, tmux::Tmux};

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn q_in_the_live_view_records_the_partial_interval() {
    if !require_root("q_in_the_live_view_records_the_partial_interval") {
        return;
    }
    let recording =
        std::env::temp_dir().join(format!("iotop-bpf-finish-{}.rec", std::process::id()));
    let _ = std::fs::remove_file(&recording);
    // Intervals of a minute: none closes before q, so only the finish can record one.
    let tmux = Tmux::start(
        "finish",
        &format!(
            "{} -d 60 --record {}; echo EXIT=$?; sleep 120",
            binary().display(),
            recording.display()
        ),
    );
    tmux.wait_for("q quit");
    tmux.keys("q");
    let screen = tmux.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    let replay = Command::new(binary())
        .args(["--json", "--replay"])
        .arg(&recording)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&recording);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let lines = String::from_utf8_lossy(&replay.stdout).lines().count();
    assert_eq!(lines, 1, "the partial interval, recorded on q");
}
