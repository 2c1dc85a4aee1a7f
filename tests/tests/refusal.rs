//! A probe the kernel refuses degrades its pane, with its reason in one line, and nothing
//! else: proved with a real refusal. `IOTOP_BPF_FAULT=reject-dstate` makes both D-state switch
//! probes read past their arguments, which every verifier refuses.

use std::process::Command;

use iotop_bpf_integration::{
    JsonRun, LoopFs, binary, process_on_device, require_root, tmux::Tmux, workload,
};

const NOTE: &str = "degraded: the D-state pane is off: dstate_switch_raw (raw_tp:sched_switch) not attached: the verifier refused it: ";

fn check(args: &[&str]) -> String {
    let out = Command::new(binary())
        .arg("check")
        .args(args)
        .env("IOTOP_BPF_FAULT", "reject-dstate")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "a refused optional probe must not stop the tool: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_refused_probe_degrades_its_pane_with_a_one_line_reason() {
    if !require_root("a_refused_probe_degrades_its_pane_with_a_one_line_reason") {
        return;
    }
    let out = check(&[]);
    let note = out
        .lines()
        .find(|l| l.starts_with(NOTE))
        .unwrap_or_else(|| panic!("no {NOTE:?} in:\n{out}"));
    // One line, short enough to read: the reason the verifier gave, and its error.
    assert!(note.len() < 300, "{note}");
    assert!(
        note.contains("(Permission denied") || note.contains("(Invalid argument"),
        "{note}"
    );
    assert!(
        out.contains("refused: dstate_switch_raw (its verifier log: iotop-bpf check --verbose)"),
        "{out}"
    );
    // Nothing else is lost: the block probes stay.
    for attached in ["tp_btf:block_rq_issue", "tp_btf:block_rq_complete"] {
        assert!(
            out.contains(&format!("attached: {attached}\n")),
            "{attached}:\n{out}"
        );
    }
    assert!(!out.contains("attached: raw_tp:sched_switch"), "{out}");
    assert!(!out.contains("attached: tp_btf:sched_switch"), "{out}");
    // The whole verifier log where it is asked for.
    let verbose = check(&["--verbose"]);
    let log = verbose
        .split("verifier log of dstate_switch_raw:")
        .nth(1)
        .unwrap_or_else(|| panic!("{verbose}"));
    assert!(log.lines().count() > 5, "{log}");
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn without_its_d_state_probe_the_tool_still_counts_io_and_says_why_in_json() {
    if !require_root("without_its_d_state_probe_the_tool_still_counts_io_and_says_why_in_json") {
        return;
    }
    let fs = LoopFs::new("ext4", 128);
    let data = fs.path("data");
    std::fs::write(&data, vec![0u8; 100 * 4096]).unwrap();
    std::fs::File::open(&data).unwrap().sync_all().unwrap();
    let run = JsonRun::start_with_env(&[], &[("IOTOP_BPF_FAULT", "reject-dstate")]);
    let (pid, _) = workload(&[
        "direct-io",
        "--file",
        data.to_str().unwrap(),
        "--writes",
        "100",
        "--reads",
        "50",
    ]);
    let (stuck, _) = workload(&["dstate", "--seconds", "2"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let intervals = run.stop();
    let mine = process_on_device(&intervals, pid, &fs.dev);
    assert_eq!((mine.writes, mine.reads), (100, 50), "{mine:?}");
    for interval in &intervals {
        let degraded: Vec<&str> = interval["degraded"]
            .as_array()
            .unwrap_or_else(|| panic!("no degraded[] in {interval}"))
            .iter()
            .filter_map(|n| n.as_str())
            .collect();
        assert!(
            degraded
                .iter()
                .any(|n| n.starts_with(NOTE.trim_start_matches("degraded: "))),
            "{degraded:?}"
        );
        assert!(
            !interval["dstate"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["pid"].as_u64() == Some(u64::from(stuck))),
            "no D-state probe, no D-state rows"
        );
    }
}

/// The live view takes its screen before the probes load: when the kernel refuses one the
/// tool cannot run without (`reject-block`: the raw completion probe), the screen is given
/// back and the reason printed on the terminal, in one line, with the exit status.
#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_refused_required_probe_gives_the_terminal_back_and_says_why() {
    if !require_root("a_refused_required_probe_gives_the_terminal_back_and_says_why") {
        return;
    }
    let tmux = Tmux::start(
        "refused",
        &format!(
            "IOTOP_BPF_FAULT=reject-block {}; echo EXIT=$?; sleep 120",
            binary().display()
        ),
    );
    let screen = tmux.wait_for("EXIT=");
    assert!(screen.contains("EXIT=1"), "{screen}");
    assert!(!tmux.alternate_screen(), "still on the alternate screen");
    // One message (tmux wraps it at 80 columns), the reason the verifier gave in it.
    let at = screen
        .find("iotop-bpf: raw_block_complete")
        .unwrap_or_else(|| panic!("no reason on the terminal:\n{screen}"));
    let reason: String = screen[at..screen.find("EXIT=").unwrap()].lines().collect();
    assert!(
        reason.contains("iotop-bpf needs it") && reason.contains("invalid bpf_context access"),
        "{screen}"
    );
    assert!(!screen.contains("panicked"), "{screen}");
}
