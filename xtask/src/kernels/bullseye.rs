//! The static binary in a Debian 11 root (glibc 2.31), on the host kernel.

use std::{fs, path::Path, process::Command};

use anyhow::Result;

use super::{Cell, dir};
use crate::util::{cmd, run, stdout_of};

/// Debian 11's userland (glibc 2.31), made with debootstrap once (target/kernels/bullseye):
/// the static binary prints its version, checks the host kernel, and replays a recording
/// as nobody there.
pub(super) fn bullseye(binary: &Path) -> Result<Vec<(String, Cell)>> {
    let root = dir().join("bullseye");
    if !root.join("etc/debian_version").exists() {
        let log = dir().join("debootstrap.log");
        println!(
            "making a Debian 11 root with debootstrap (once; log: {}) ...",
            log.display()
        );
        fs::create_dir_all(dir())?;
        run(cmd("debootstrap")
            .args(["--variant=minbase", "bullseye"])
            .arg(&root)
            .arg("http://deb.debian.org/debian")
            .stdout(fs::File::create(&log)?)
            .stderr(fs::File::create(dir().join("debootstrap.err"))?))?;
    }
    let glibc = stdout_of(cmd("chroot").arg(&root).args(["ldd", "--version"]))?;
    let glibc = glibc.lines().next().unwrap_or("").to_string();
    fs::copy(binary, root.join("iotop-bpf"))?;
    // A recording made here, replayed there as nobody.
    let recording = root.join("tmp/smoke.iorec");
    let _ = fs::remove_file(&recording);
    run(Command::new(binary)
        .args(["--json", "-n", "2", "-d", "0.5", "--record"])
        .arg(&recording)
        .stdout(std::process::Stdio::null()))?;
    run(Command::new("chmod").arg("0644").arg(&recording))?;
    for mount in ["proc", "sys"] {
        let target = root.join(mount);
        if !cmd("mountpoint")
            .arg("-q")
            .arg(&target)
            .status()
            .is_ok_and(|s| s.success())
        {
            run(cmd("mount")
                .args(["--bind", &format!("/{mount}")])
                .arg(&target))?;
        }
    }
    let chroot = |user: Option<&str>, args: &[&str]| -> Cell {
        let mut c = cmd("chroot");
        if let Some(user) = user {
            c.arg(format!("--userspec={user}"));
        }
        let out = c
            .arg(&root)
            .arg("/iotop-bpf")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!("{args:?}: {}: {text}", out.status))
        }
    };
    let version = chroot(None, &["--version"]).map(|v| format!("{} under {glibc}", v.trim()));
    let check = chroot(None, &["check"]).and_then(|t| {
        if t.contains("\nok") {
            Ok(format!(
                "check on the host kernel: {} probes",
                t.lines().filter(|l| l.starts_with("attached: ")).count()
            ))
        } else {
            Err(t)
        }
    });
    let replay = chroot(
        Some("65534:65534"),
        &["--replay", "/tmp/smoke.iorec", "--json"],
    )
    .and_then(|t| {
        let lines = t.lines().filter(|l| l.starts_with('{')).count();
        if lines >= 2 {
            Ok(format!("--replay as nobody: {lines} intervals"))
        } else {
            Err(format!("--replay printed {lines} intervals: {t}"))
        }
    });
    // Lazily: the probes' detaching child may still hold them for a moment.
    for mount in ["sys", "proc"] {
        let _ = cmd("umount").arg("-l").arg(root.join(mount)).status();
    }
    Ok(vec![
        ("--version".to_string(), version),
        ("check".to_string(), check),
        ("replay".to_string(), replay),
    ])
}
