//! Without privileges the tool says what is missing, clearly, and exits non-zero.

use std::{os::unix::process::CommandExt as _, process::Command};

use iotop_bpf_integration::{
    DOCUMENTED_CAPS, JsonRun, LoopFs, as_nobody_with, process_on_device, require_root,
    unprivileged_copy, workload,
};

#[test]
#[ignore = "needs root (to switch to an unprivileged user): run with `cargo xtask test`"]
fn unprivileged_run_explains_and_fails() {
    if !require_root("unprivileged_run_explains_and_fails") {
        return;
    }
    let (dir, exe) = unprivileged_copy("unpriv");
    for args in [&["--json", "-n", "1"][..], &[][..], &["--batch"][..]] {
        let out = Command::new(&exe)
            .args(args)
            .uid(65534)
            .gid(65534)
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("needs root") && stderr.contains("sudo iotop-bpf"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "{stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "nothing on stdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs root (to hand out capabilities): run with `cargo xtask test`"]
fn the_documented_capabilities_suffice_to_attribute_direct_io_exactly() {
    if !require_root("the_documented_capabilities_suffice_to_attribute_direct_io_exactly") {
        return;
    }
    let (dir, exe) = unprivileged_copy("caps");
    let check = as_nobody_with(DOCUMENTED_CAPS, &exe)
        .arg("check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Raw tracepoints need no perf_event_open, which Debian's and Ubuntu's kernels refuse
    // without CAP_SYS_ADMIN: the block probes are raw, whatever perf_event_paranoid says.
    assert!(
        stdout.contains("attached: raw_tp:block_io_start")
            || stdout.contains("attached: raw_tp:block_rq_insert"),
        "{stdout}"
    );
    // Only what needs CAP_SYS_ADMIN is degraded, and the note says so.
    let notes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("degraded: no CAP_"))
        .collect();
    assert_eq!(notes.len(), 1, "{stdout}");
    assert!(notes[0].contains("CAP_SYS_ADMIN"), "{stdout}");

    const WRITES: u64 = 200;
    const READS: u64 = 100;
    let fs = LoopFs::new("ext4", 128);
    let data = fs.path("data");
    std::fs::write(&data, vec![0u8; usize::try_from(WRITES * 4096).unwrap()]).unwrap();
    std::fs::File::open(&data).unwrap().sync_all().unwrap();
    let run = JsonRun::start_command(as_nobody_with(DOCUMENTED_CAPS, &exe));
    let (pid, _) = workload(&[
        "direct-io",
        "--file",
        data.to_str().unwrap(),
        "--writes",
        &WRITES.to_string(),
        "--reads",
        &READS.to_string(),
    ]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let intervals = run.stop();
    let mine = process_on_device(&intervals, pid, &fs.dev);
    assert_eq!(
        (mine.writes, mine.write_bytes, mine.reads, mine.read_bytes),
        (WRITES, WRITES * 4096, READS, READS * 4096),
        "pid {pid} on {} as nobody with {DOCUMENTED_CAPS}: {mine:?}",
        fs.name
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CAP_BPF and CAP_PERFMON alone run the probes: raw tracepoints need neither tracefs nor
/// perf_event_open. Where tracefs is closed to other users (mode 0700, as on recent kernels)
/// a note names CAP_DAC_READ_SEARCH, which only the classic fallbacks need.
#[test]
#[ignore = "needs root (to hand out capabilities): run with `cargo xtask test`"]
fn bpf_and_perfmon_alone_suffice_and_name_what_tracefs_needs() {
    use std::os::unix::fs::MetadataExt as _;
    if !require_root("bpf_and_perfmon_alone_suffice_and_name_what_tracefs_needs") {
        return;
    }
    let tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .find(|p| std::path::Path::new(p).join("events/block").is_dir())
        .expect("tracefs is mounted (the other privileged tests mount it if needed)");
    let open_to_others = std::fs::metadata(tracefs).unwrap().mode() & 0o005 == 0o005;
    let (dir, exe) = unprivileged_copy("bpf-perfmon");
    let out = as_nobody_with("+bpf,+perfmon", &exe)
        .arg("check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("probes: raw tracepoints"), "{stdout}");
    if !open_to_others {
        assert!(
            stdout.contains("degraded: tracefs: ") && stdout.contains("CAP_DAC_READ_SEARCH"),
            "{stdout}"
        );
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
