//! `cargo xtask kernels`: the kernel matrix. Debian's stock kernel packages (versions and
//! checksums pinned below, downloaded once into target/kernels/) boot under QEMU through
//! virtme-ng, with the host's root shared read-only; in each guest the static binary runs
//! `--version` and `check`, and the smoke set (tests/tests/smoke.rs) runs as root and as
//! nobody with the documented capabilities. A Debian 11 root made with debootstrap
//! (glibc 2.31) shows the static binary running there too. It prints a table and writes it
//! to target/kernels/matrix.md; any failed cell fails the command.
//!
//! QEMU uses KVM where the CPU offers it to this machine (vmx/svm), else TCG with one
//! thread: multi-threaded TCG panicked the 6.12 guest on int3 while tracepoints were being
//! patched (../shared/research/kernel-matrix-qemu.md).

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context, Result, bail};

use crate::util::{cmd, download, find_in_path, root_dir, run, stdout_of};

mod bullseye;

/// A kernel of the matrix: a Debian package, pinned by version and checksum.
struct Kernel {
    /// The name in the table and of its fixture (`tui/tests/data/kernels/<name>.json`).
    name: &'static str,
    /// Who runs it.
    who: &'static str,
    /// `uname -r`, the package's directory names.
    release: &'static str,
    url: &'static str,
    sha256: &'static str,
}

const MIRROR: &str = "http://deb.debian.org/debian-security/pool/updates/main/l";

const KERNELS: [Kernel; 3] = [
    Kernel {
        name: "5.10",
        who: "Debian 11",
        release: "5.10.0-46-amd64",
        url: "linux-signed-amd64/linux-image-5.10.0-46-amd64_5.10.262-1_amd64.deb",
        sha256: "6d89bdf9a7c4458c64de7221edfb8e7b2c3279012636e4bb9d6bba4e6b7a67eb",
    },
    Kernel {
        name: "6.1",
        who: "Debian 12",
        release: "6.1.0-56-amd64",
        url: "linux-signed-amd64/linux-image-6.1.0-56-amd64_6.1.192-2_amd64.deb",
        sha256: "a86e2049672f52354c4536a089203b6c82639420424d31c91cf31a181fd4d8f1",
    },
    Kernel {
        name: "6.12",
        who: "Debian 12 security, Debian 13",
        release: "6.12.117+deb12-amd64",
        url: "linux-signed-6.12-amd64/linux-image-6.12.117%2bdeb12-amd64_6.12.117-1%7edeb12u1_amd64.deb",
        sha256: "803d36a7cda13355ae8152122470288b2636f19f1cb58162dd9d8b408af9b1b4",
    },
];

/// virtme-ng, from PyPI, pinned: it builds the guest's initramfs from the host's busybox
/// and the kernel package's modules, and shares the host's root over 9p.
const VIRTME_NG: &str = "virtme-ng==1.42";

/// What the host needs: QEMU, depmod and busybox (virtme-ng's initramfs), debootstrap (the
/// Debian 11 root).
pub const PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "kmod",
    "busybox-static",
    "debootstrap",
    "python3-venv",
];

#[derive(clap::Args, Default)]
pub struct Args {
    /// Only the kernels whose name starts with this (`5.10`, `6.1`, `6.12`).
    #[arg(long)]
    pub only: Option<String>,
    /// Copy each guest's `check --facts` over its fixture (tui/tests/data/kernels/).
    #[arg(long)]
    pub update_fixtures: bool,
}

fn dir() -> PathBuf {
    root_dir().join("target/kernels")
}

/// Downloads the kernel package (once; checked against its pinned checksum) and extracts it.
fn fetch(kernel: &Kernel) -> Result<PathBuf> {
    let deb = download(
        &format!("{MIRROR}/{}", kernel.url),
        kernel.sha256,
        &dir().join("debs"),
    )
    .with_context(|| format!("Linux {}", kernel.name))?;
    let root = dir().join(kernel.release);
    let vmlinuz = root.join(format!("boot/vmlinuz-{}", kernel.release));
    if !vmlinuz.exists() {
        fs::create_dir_all(&root)?;
        run(cmd("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
    }
    Ok(vmlinuz)
}

/// virtme-ng in a venv of its own (target/kernels/venv); the `vng` to run.
fn virtme_ng() -> Result<PathBuf> {
    let venv = dir().join("venv");
    let vng = venv.join("bin/vng");
    if vng.exists() {
        println!("ok: {VIRTME_NG}");
        return Ok(vng);
    }
    run(cmd("python3").args(["-m", "venv"]).arg(&venv))?;
    run(cmd(venv.join("bin/pip")).args(["install", "--quiet", VIRTME_NG]))?;
    Ok(vng)
}

/// The integration test binary `name` (built by cargo, its path from cargo's JSON).
pub fn test_binary(name: &str) -> Result<PathBuf> {
    let out = stdout_of(cmd("cargo").args([
        "test",
        "--release",
        "--package",
        "iotop-bpf-integration",
        "--test",
        name,
        "--no-run",
        "--message-format=json",
    ]))?;
    out.lines()
        .filter(|l| l.contains("\"compiler-artifact\"") && l.contains("\"executable\":\""))
        .find_map(|l| {
            let at = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            Some(PathBuf::from(&l[at..at + l[at..].find('"')?]))
        })
        .with_context(|| format!("cargo built no test binary {name}"))
}

/// The script each guest runs (as root, in the guest).
fn guest_script(out: &Path, binary: &Path, smoke: &Path) -> String {
    format!(
        r#"#!/bin/bash
# Written by `cargo xtask kernels`.
OUT={out}
BIN={binary}
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug
for m in loop ext4 xfs btrfs; do modprobe $m 2>/dev/null; done
uname -r > $OUT/uname.txt
$BIN --version > $OUT/version.txt 2>&1; echo "rc=$?" >> $OUT/version.txt
# The facts first: a run's maps are freed lazily, and before 5.11 they still count against
# RLIMIT_MEMLOCK for a moment after it.
$BIN check --facts > $OUT/facts.json 2> /dev/null
$BIN check > $OUT/check.txt 2>&1; echo "rc=$?" >> $OUT/check.txt
$BIN check --verbose > $OUT/check-verbose.txt 2>&1
cd /tmp
IOTOP_BPF_BIN=$BIN CI=true IOTOP_BPF_SMOKE_OUT=$OUT timeout 1500 {smoke} --ignored --test-threads=1 > $OUT/smoke.txt 2>&1
echo "rc=$?" >> $OUT/smoke.txt
"#,
        out = out.display(),
        binary = binary.display(),
        smoke = smoke.display()
    )
}

/// Whether this machine's CPU offers hardware virtualisation to QEMU.
fn kvm() -> bool {
    Path::new("/dev/kvm").exists()
        && fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
            c.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
        })
}

/// Boots `vmlinuz` and runs the guest script in it (at most 40 minutes).
fn boot(vng: &Path, vmlinuz: &Path, script: &Path, out: &Path) -> Result<()> {
    let mut command = cmd("timeout");
    command
        .current_dir("/tmp")
        .arg("2400")
        .arg(vng)
        .args(["--force-9p", "--cpus", "2", "-m", "4G"])
        .arg(format!("--rwdir={}", out.display()));
    if !kvm() {
        command.args(["--disable-kvm", "--qemu-opts=-accel tcg,thread=single"]);
    }
    // vng runs virtme-run from PATH.
    let path = format!(
        "{}:{}",
        vng.parent().unwrap_or(Path::new(".")).display(),
        crate::util::child_path().to_string_lossy()
    );
    let status = command
        .arg("-r")
        .arg(vmlinuz)
        .arg("-e")
        .arg(format!(
            "{} > {}/guest.log 2>&1",
            script.display(),
            out.display()
        ))
        .env("PATH", path)
        .stdin(std::process::Stdio::null())
        .stdout(fs::File::create(out.join("vng.log"))?)
        .stderr(fs::File::create(out.join("vng.err"))?)
        .status()?;
    if !status.success() {
        bail!(
            "the guest ended with {status} (a kernel panic ends QEMU with 255); see {}",
            out.join("vng.err").display()
        );
    }
    Ok(())
}

/// One cell: `Ok(detail)` or `Err(detail)`.
type Cell = Result<String, String>;

/// The smoke set's cells for `mode` (`root`, `capabilities`) from the guest's output.
fn smoke_cells(out: &Path, mode: &str) -> Vec<(String, Cell)> {
    let Ok(text) = fs::read_to_string(out.join(format!("{mode}.txt"))) else {
        let why = fs::read_to_string(out.join("smoke.txt"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.contains("panicked") || l.contains("error"))
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "the smoke set wrote nothing".to_string());
        return vec![("smoke".to_string(), Err(why))];
    };
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, '\t');
            let (cell, verdict, detail) = (parts.next()?, parts.next()?, parts.next()?);
            Some((
                cell.to_string(),
                if verdict == "pass" {
                    Ok(detail.to_string())
                } else {
                    Err(detail.to_string())
                },
            ))
        })
        .collect()
}

/// The `loads` cell: `check` exits 0 as root with nothing refused; its mode and notes.
fn loads_cell(out: &Path) -> Cell {
    let check = fs::read_to_string(out.join("check.txt")).unwrap_or_default();
    let version = fs::read_to_string(out.join("version.txt")).unwrap_or_default();
    if !version.contains("rc=0") {
        return Err(format!("--version: {}", version.trim()));
    }
    if !check.contains("\nrc=0") {
        let why = check
            .lines()
            .find(|l| l.starts_with("iotop-bpf:"))
            .unwrap_or("check failed");
        return Err(why.to_string());
    }
    if let Some(refused) = check.lines().find(|l| l.starts_with("refused: ")) {
        return Err(refused.to_string());
    }
    let attached = check
        .lines()
        .filter(|l| l.starts_with("attached: "))
        .count();
    let raw = check
        .lines()
        .filter(|l| l.starts_with("attached: raw_tp:"))
        .count();
    let degraded = check
        .lines()
        .filter(|l| l.starts_with("degraded: "))
        .count();
    Ok(format!("{attached} probes ({raw} raw), {degraded} notes"))
}

fn mark(cell: &Cell) -> &'static str {
    if cell.is_ok() { "yes" } else { "**NO**" }
}

/// One row of the table and the details behind it.
struct Row {
    kernel: String,
    cells: Vec<(String, Cell)>,
}

impl Row {
    fn get(&self, name: &str) -> Cell {
        self.cells
            .iter()
            .find(|(n, _)| n == name)
            .map_or_else(|| Err(format!("{name}: not run")), |(_, c)| c.clone())
    }
}

/// The table, in Markdown.
fn table(rows: &[Row]) -> String {
    let mut md = String::from(
        "| kernel | loads | attribution = diskstats | syncs (short-lived) | D state, wait sites | findings (lab001, XFS tail) | documented capabilities |\n|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let findings = match (row.get("lab001"), row.get("xfs tail")) {
            (Ok(_), Ok(_)) => Ok(String::new()),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let with_caps: Vec<&Cell> = row
            .cells
            .iter()
            .filter(|(n, _)| n.starts_with("capabilities "))
            .map(|(_, c)| c)
            .collect();
        let least: Cell = if with_caps.is_empty() {
            Err("not run".to_string())
        } else {
            with_caps
                .into_iter()
                .try_for_each(|c| c.clone().map(drop))
                .map(|()| String::new())
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            row.kernel,
            mark(&row.get("loads")),
            mark(&row.get("attribution")),
            mark(&row.get("syncs")),
            mark(&row.get("dstate")),
            mark(&findings),
            mark(&least),
        );
    }
    md.push('\n');
    for row in rows {
        for (name, cell) in &row.cells {
            let _ = match cell {
                Ok(detail) => writeln!(md, "- {} {name}: {detail}", row.kernel),
                Err(why) => writeln!(md, "- {} {name}: **FAILED**: {why}", row.kernel),
            };
        }
    }
    md
}

pub fn kernels(args: &Args, binary: &Path) -> Result<()> {
    if !crate::util::is_root() {
        bail!("the kernel matrix mounts a Debian root and hands out capabilities: run it as root");
    }
    for tool in ["curl", "dpkg-deb", "sha256sum", "timeout"] {
        if find_in_path(tool).is_none() {
            bail!("{tool} is not installed");
        }
    }
    let started = Instant::now();
    let vng = virtme_ng()?;
    let smoke = test_binary("smoke")?;
    let kernels: Vec<&Kernel> = KERNELS
        .iter()
        .filter(|k| args.only.as_deref().is_none_or(|o| k.name.starts_with(o)))
        .collect();
    let mut rows = Vec::new();
    let userland = match bullseye::bullseye(binary) {
        Ok(cells) => cells,
        Err(e) => vec![("debootstrap".to_string(), Err(format!("{e:#}")))],
    };
    for kernel in kernels {
        let t = Instant::now();
        let vmlinuz = fetch(kernel)?;
        let out = dir().join("out").join(kernel.name);
        if out.exists() {
            fs::remove_dir_all(&out)?;
        }
        fs::create_dir_all(&out)?;
        let script = out.join("guest.sh");
        fs::write(&script, guest_script(&out, binary, &smoke))?;
        run(cmd("chmod").arg("+x").arg(&script))?;
        println!("booting Linux {} ({}) ...", kernel.release, kernel.who);
        let mut cells = vec![];
        match boot(&vng, &vmlinuz, &script, &out) {
            Ok(()) => {
                cells.push(("loads".to_string(), loads_cell(&out)));
                cells.extend(smoke_cells(&out, "root"));
                cells.extend(
                    smoke_cells(&out, "capabilities")
                        .into_iter()
                        .map(|(n, c)| (format!("capabilities {n}"), c)),
                );
            }
            Err(e) => cells.push(("loads".to_string(), Err(format!("{e:#}")))),
        }
        if args.update_fixtures {
            let facts = out.join("facts.json");
            if fs::metadata(&facts).is_ok_and(|m| m.len() > 0) {
                let fixture = root_dir()
                    .join("tui/tests/data/kernels")
                    .join(format!("{}.json", kernel.name));
                fs::copy(&facts, &fixture)?;
                println!("updated {}", fixture.display());
            }
        }
        println!(
            "Linux {}: {:.0} s, {}",
            kernel.release,
            t.elapsed().as_secs_f64(),
            if cells.iter().all(|(_, c)| c.is_ok()) {
                "all passed"
            } else {
                "FAILED"
            }
        );
        rows.push(Row {
            kernel: format!("{} ({})", kernel.release, kernel.who),
            cells,
        });
    }
    let mut md = table(&rows);
    md.push_str("\nThe static binary in a Debian 11 root (debootstrap; glibc 2.31), on the host kernel:\n\n");
    for (name, cell) in &userland {
        let _ = match cell {
            Ok(detail) => writeln!(md, "- {name}: {detail}"),
            Err(why) => writeln!(md, "- {name}: **FAILED**: {why}"),
        };
    }
    rows.push(Row {
        kernel: "Debian 11 root".to_string(),
        cells: userland,
    });
    fs::write(dir().join("matrix.md"), &md)?;
    println!(
        "\nkernel matrix ({:.0} s, QEMU with {}):\n\n{md}",
        started.elapsed().as_secs_f64(),
        if kvm() { "KVM" } else { "TCG" }
    );
    let failed: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            r.cells
                .iter()
                .filter(|(_, c)| c.is_err())
                .map(move |(n, _)| format!("{} {n}", r.kernel))
        })
        .collect();
    if !failed.is_empty() {
        bail!("the kernel matrix failed: {}", failed.join("; "));
    }
    Ok(())
}
