//! `iotop-bpf demo`: the catalogue on scratch filesystems it makes and removes itself.

use std::process::Command;

use iotop_bpf_integration::{binary, require_root};

/// The mounts and loop devices a demo with this pid left (its scratch filesystems are named
/// `iotop-bpf-demo-PID-FS`); another run's, interrupted on this machine, are not this one's.
fn leftovers(pid: u32) -> Vec<String> {
    let tag = format!("iotop-bpf-demo-{pid}-");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let mut found: Vec<String> = mounts
        .lines()
        .filter(|l| l.contains(&tag))
        .map(String::from)
        .collect();
    let loops = Command::new("losetup").arg("-a").output().unwrap();
    found.extend(
        String::from_utf8_lossy(&loops.stdout)
            .lines()
            .filter(|l| l.contains(&tag))
            .map(String::from),
    );
    found
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn the_demo_shows_each_step_with_its_caption_and_cleans_up() {
    if !require_root("the_demo_shows_each_step_with_its_caption_and_cleans_up") {
        return;
    }
    let demo = Command::new(binary())
        .args([
            "demo",
            "--batch",
            "--only",
            "small-sync,aio-randwrite",
            "--step-seconds",
            "3",
        ])
        .env_remove("RUST_BACKTRACE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = demo.id();
    let out = demo.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("=== demo 1/2 small-sync: 128 B fsynced appends"),
        "{stdout}"
    );
    assert!(stdout.contains("=== demo 2/2 aio-randwrite:"), "{stdout}");
    assert!(stdout.contains("=== demo over"), "{stdout}");
    assert!(
        stdout.contains("FINDING critical write_amplification"),
        "the small-sync step is named: {stdout}"
    );
    assert!(
        leftovers(pid).is_empty(),
        "left behind: {:?}",
        leftovers(pid)
    );

    // Without root it says so plainly.
    let (dir, exe) = iotop_bpf_integration::unprivileged_copy("demo");
    let out = std::os::unix::process::CommandExt::uid(&mut Command::new(&exe), 65534)
        .arg("demo")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the demo needs root"), "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}
