//! Record and replay: a recording of real probes replays, without root, into exactly the
//! reports the live run printed; a corrupt recording gets a clear message.

use std::{os::unix::process::CommandExt as _, process::Command};

use iotop_bpf_integration::{JsonRun, LoopFs, require_root, unprivileged_copy, workload};

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_recording_replays_without_root_into_the_same_reports() {
    if !require_root("a_recording_replays_without_root_into_the_same_reports") {
        return;
    }
    let (dir, exe) = unprivileged_copy("replay");
    let recording = dir.join("incident.ndjson");
    let fs = LoopFs::new("ext4", 256);
    let run = JsonRun::start(&["--record", recording.to_str().unwrap()]);
    workload(&["dstate", "--seconds", "1"]);
    // Cut the live run with SIGINT while a writer is mid-stream: its last sync calls and
    // journal charges are still pending, and the final report settles them.
    let mut writer = Command::new(iotop_bpf_integration::binary())
        .args(["workload", "small-sync", "--dir"])
        .arg(fs.path("rec"))
        .args(["--count", "100000", "--interval-ms", "1"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1_300));
    let live = run.stop();
    let _ = writer.kill();
    let _ = writer.wait();
    let last = live.last().unwrap();
    assert!(
        last["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["charged_write_bytes"].as_u64().unwrap_or(0) > 0),
        "the SIGINT-cut interval settled the pending journal charges: {last}"
    );
    let mut perms = std::fs::metadata(&recording).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(&recording, perms).unwrap();

    let out = Command::new(&exe)
        .args(["--replay"])
        .arg(&recording)
        .arg("--json")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "replay as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        replayed.len(),
        live.len(),
        "one report per recorded interval"
    );
    for (i, (a, b)) in live.iter().zip(&replayed).enumerate() {
        assert_eq!(
            a, b,
            "interval {i} differs between the live run and its replay"
        );
    }
    assert!(
        live.iter()
            .any(|i| !i["findings"].as_array().unwrap().is_empty()),
        "the recording has findings"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs the release binary: run with `cargo xtask test`"]
fn a_corrupt_recording_gets_a_clear_message() {
    let (dir, exe) = unprivileged_copy("corrupt");
    let cases = [
        ("empty", String::new(), "is empty"),
        ("garbage", "\u{1}\u{2} not json\n".to_string(), "is not an iotop-bpf recording"),
        (
            "truncated",
            r#"{"format":"iotop-bpf recording","version":1,"host":"h","kernel":"k","started_ns":0,"started_unix_ms":0,"interval_ns":1000000000}
{"block":{"dev":{"major":7"#
                .to_string(),
            "cut short at byte",
        ),
    ];
    for (name, content, expected) in cases {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        // The live view fails as plainly (here: before the terminal, as stdout is not one).
        let views: &[&[&str]] = if name == "truncated" {
            &[&["--json"]]
        } else {
            &[&["--json"], &[]]
        };
        for args in views {
            let out = Command::new(&exe)
                .arg("--replay")
                .arg(&path)
                .args(args.iter())
                .env_remove("RUST_BACKTRACE")
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name} {args:?}: {stderr}");
            assert!(stderr.contains(expected), "{name} {args:?}: {stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
    let missing = Command::new(&exe)
        .args(["--replay", "/nonexistent/recording", "--json"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot open the recording"));
    std::fs::remove_dir_all(&dir).unwrap();
}
