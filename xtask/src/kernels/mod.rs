//! `cargo xtask kernels`: the kernel matrix. Debian's stock kernel packages (versions and
//! checksums pinned in `list.rs`, downloaded once into target/kernels/) boot under QEMU.
//! The x86-64 ones boot through virtme-ng, with the host's root shared read-only; in each
//! guest the static binary runs `--version` and `check`, and the smoke set
//! (tests/tests/smoke.rs) runs as root and as nobody with the documented capabilities (the
//! newest kernel also runs the write-back test; the lockdown boot the smoke set as root).
//! The arm64 ones boot under qemu-system-aarch64 into an initramfs of busybox and the static
//! aarch64 binary (`arm64.rs`), which run the smoke set's workloads; the smoke set judges
//! them on the host. A Debian 11 root made with debootstrap (glibc 2.31) shows the static
//! binary running there too. It prints a table and writes it to target/kernels/matrix.md;
//! any failed cell fails the command.
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

use crate::{
    target::Target,
    util::{cmd, download, find_in_path, root_dir, run, stdout_of},
};

mod arm64;
mod bullseye;
mod cells;
mod list;

use self::cells::{Cell, Row, loads_cell, lockdown_cell, smoke_cells, table, writeback_cell};

/// A kernel of the matrix: Debian's packages of it, pinned by version and checksum.
struct Kernel {
    /// The name in the table and of its fixture (`probe/tests/data/kernels/<name>.json`).
    name: &'static str,
    /// Who runs it.
    who: &'static str,
    /// `uname -r`, the package's directory names.
    release: &'static str,
    arch: Target,
    /// (pool, (path in it, SHA-256)) of each package it comes in.
    debs: &'static [(&'static str, (&'static str, &'static str))],
    /// More of the kernel's command line.
    append: &'static str,
    expect: Expect,
    /// Also run the write-back test (write-back charged to the process that dirtied it).
    writeback: bool,
    /// Where its system-call probes must run: how `check`'s `system calls:` line begins
    /// (`trampolines`, `raw`, or `none` under lockdown).
    syscalls: &'static str,
}

/// What a kernel's row must show to pass.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Everything loads, every cell of the smoke set holds.
    Everything,
    /// `lockdown=confidentiality`: it refuses `bpf_probe_read_kernel` and hides tracefs's
    /// events. The typed block probes (direct loads) and the D-state probe run, and the
    /// cells of [`LOCKDOWN_KEEPS`] must hold; every other cell may be lost, but only where
    /// `check` names its loss with lockdown as the reason ([`LOCKDOWN_LOSSES`]).
    Lockdown,
}

/// virtme-ng, from PyPI, pinned: it builds the guest's initramfs from the host's busybox
/// and the kernel package's modules, and shares the host's root over 9p.
const VIRTME_NG: &str = "virtme-ng==1.42";

/// What the host needs: QEMU for both architectures, depmod and busybox (virtme-ng's
/// initramfs), cpio and xz (the arm64 one, from modules packed as .ko.xz from 6.12),
/// debootstrap (the Debian 11 root).
pub const PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "qemu-system-arm",
    "kmod",
    "busybox-static",
    "cpio",
    "xz-utils",
    "debootstrap",
    "python3-venv",
];

#[derive(clap::Args, Default)]
pub struct Args {
    /// Only the kernels whose name starts with this (`5.10`, `6.1`, `7.3`, `lockdown`,
    /// `arm64`).
    #[arg(long)]
    pub only: Option<String>,
    /// Copy each guest's `check --facts` over its fixture (probe/tests/data/kernels/).
    #[arg(long)]
    pub update_fixtures: bool,
}

fn dir() -> PathBuf {
    root_dir().join("target/kernels")
}

/// Downloads the kernel's packages (once; checked against their pinned checksums) and
/// extracts them into target/kernels/RELEASE; returns that directory and the image in it.
fn fetch(kernel: &Kernel) -> Result<(PathBuf, PathBuf)> {
    let root = dir().join(kernel.release);
    let done = root.join(".extracted");
    if !done.exists() {
        for (pool, (path, sha256)) in kernel.debs {
            let deb = download(&format!("{pool}/{path}"), sha256, &dir().join("debs"))
                .with_context(|| format!("Linux {}", kernel.name))?;
            fs::create_dir_all(&root)?;
            run(cmd("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
        }
        fs::write(&done, "")?;
    }
    // /boot before 7.x, beside the modules from 7.x.
    let image = [
        format!("boot/vmlinuz-{}", kernel.release),
        format!("usr/lib/modules/{}/vmlinuz", kernel.release),
    ]
    .into_iter()
    .map(|p| root.join(p))
    .find(|p| p.exists())
    .with_context(|| format!("no kernel image in the packages of Linux {}", kernel.name))?;
    Ok((root, image))
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
    // The test's own artifact: cargo also builds the package's binaries (as-nobody).
    let target = format!("\"kind\":[\"test\"],\"crate_types\":[\"bin\"],\"name\":\"{name}\"");
    out.lines()
        .filter(|l| l.contains("\"compiler-artifact\"") && l.contains("\"executable\":\""))
        .filter(|l| l.contains(&target))
        .find_map(|l| {
            let at = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            Some(PathBuf::from(&l[at..at + l[at..].find('"')?]))
        })
        .with_context(|| format!("cargo built no test binary {name}"))
}

/// The script each x86-64 guest runs (as root, in the guest).
fn guest_script(kernel: &Kernel, out: &Path, binary: &Path, smoke: &Path) -> Result<String> {
    // Under confidentiality lockdown too: the cells it keeps are judged, the rest named.
    let smoke = format!(
        "IOTOP_BPF_BIN=$BIN CI=true IOTOP_BPF_SMOKE_OUT=$OUT timeout 1500 {} --ignored --test-threads=1 > $OUT/smoke.txt 2>&1\necho \"rc=$?\" >> $OUT/smoke.txt\n",
        smoke.display()
    );
    let writeback = if kernel.writeback {
        format!(
            "IOTOP_BPF_BIN=$BIN CI=true timeout 900 {} --ignored --test-threads=1 --nocapture > $OUT/writeback.txt 2>&1\necho \"rc=$?\" >> $OUT/writeback.txt\n",
            test_binary("writeback")?.display()
        )
    } else {
        String::new()
    };
    Ok(format!(
        r#"#!/bin/bash
# Written by `cargo xtask kernels`.
OUT={out}
BIN={binary}
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug
mountpoint -q /sys/kernel/security || mount -t securityfs nodev /sys/kernel/security
for m in loop ext4 xfs btrfs; do modprobe $m 2>/dev/null; done
uname -r > $OUT/uname.txt
$BIN --version > $OUT/version.txt 2>&1; echo "rc=$?" >> $OUT/version.txt
# The facts first: a run's maps are freed lazily, and before 5.11 they still count against
# RLIMIT_MEMLOCK for a moment after it.
$BIN check --facts > $OUT/facts.json 2> /dev/null
$BIN check > $OUT/check.txt 2>&1; echo "rc=$?" >> $OUT/check.txt
$BIN check --verbose > $OUT/check-verbose.txt 2>&1
cd /tmp
{smoke}{writeback}"#,
        out = out.display(),
        binary = binary.display(),
    ))
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
fn boot(vng: &Path, vmlinuz: &Path, append: &str, script: &Path, out: &Path) -> Result<()> {
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
    if !append.is_empty() {
        command.arg(format!("--append={append}"));
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

/// What the guests run, built once.
struct Guests {
    /// The static x86-64 binary.
    binary: PathBuf,
    vng: PathBuf,
    /// The smoke set's test binary (run in the x86-64 guests, and on the host to judge the
    /// arm64 guests' runs).
    smoke: PathBuf,
    arm64: Option<arm64::Binaries>,
}

/// Boots `kernel` and returns its cells.
fn run_kernel(kernel: &Kernel, guests: &Guests, out: &Path) -> Result<Vec<(String, Cell)>> {
    let (root, image) = fetch(kernel)?;
    let mut cells = vec![];
    match kernel.arch {
        Target::X86_64 => {
            let script = out.join("guest.sh");
            fs::write(
                &script,
                guest_script(kernel, out, &guests.binary, &guests.smoke)?,
            )?;
            run(cmd("chmod").arg("+x").arg(&script))?;
            boot(&guests.vng, &image, kernel.append, &script, out)?;
        }
        Target::Aarch64 => {
            let binaries = guests.arm64.as_ref().context("no aarch64 binaries")?;
            arm64::boot(kernel, &root, &image, binaries, out)?;
            // The smoke set's own cells, judged here on what the guest recorded (each cell's
            // verdict in MODE.txt, as the smoke set leaves them in the other guests).
            let judged = cmd(&guests.smoke)
                .args(["--ignored", "--exact", "judge_a_guests_run", "--nocapture"])
                .env("IOTOP_BPF_SMOKE_JUDGE", out)
                .output()?;
            fs::write(
                out.join("smoke.txt"),
                [judged.stdout, judged.stderr].concat(),
            )?;
        }
    }
    cells.push((
        "loads".to_string(),
        loads_cell(out, kernel.expect, kernel.syscalls),
    ));
    let check = fs::read_to_string(out.join("check.txt")).unwrap_or_default();
    let judged = |(name, cell): (String, Cell)| match kernel.expect {
        Expect::Everything => (name, cell),
        Expect::Lockdown => {
            let cell = lockdown_cell(&name, cell, &check);
            (name, cell)
        }
    };
    cells.extend(smoke_cells(out, "root").into_iter().map(judged));
    cells.extend(
        smoke_cells(out, "capabilities")
            .into_iter()
            .map(judged)
            .map(|(n, c)| (format!("capabilities {n}"), c)),
    );
    if kernel.writeback {
        cells.push(("write-back".to_string(), writeback_cell(out)));
    }
    Ok(cells)
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
    let kernels: Vec<&Kernel> = list::KERNELS
        .iter()
        .filter(|k| args.only.as_deref().is_none_or(|o| k.name.starts_with(o)))
        .collect();
    let guests = Guests {
        binary: binary.to_path_buf(),
        vng: virtme_ng()?,
        smoke: test_binary("smoke")?,
        arm64: if kernels.iter().any(|k| k.arch == Target::Aarch64) {
            Some(arm64::Binaries::build()?)
        } else {
            None
        },
    };
    let mut rows = Vec::new();
    let userland = match bullseye::bullseye(binary) {
        Ok(cells) => cells,
        Err(e) => vec![("debootstrap".to_string(), Err(format!("{e:#}")))],
    };
    for kernel in kernels {
        let t = Instant::now();
        let out = dir().join("out").join(kernel.name);
        if out.exists() {
            fs::remove_dir_all(&out)?;
        }
        fs::create_dir_all(&out)?;
        println!("booting Linux {} ({}) ...", kernel.release, kernel.who);
        let cells = match run_kernel(kernel, &guests, &out) {
            Ok(cells) => cells,
            Err(e) => vec![("loads".to_string(), Err(format!("{e:#}")))],
        };
        if args.update_fixtures {
            let facts = out.join("facts.json");
            if fs::metadata(&facts).is_ok_and(|m| m.len() > 0) {
                let fixture = root_dir()
                    .join("probe/tests/data/kernels")
                    .join(format!("{}.json", kernel.name));
                fs::copy(&facts, &fixture)?;
                println!("updated {}", fixture.display());
            }
        }
        let seconds = t.elapsed().as_secs_f64();
        println!(
            "Linux {}: {seconds:.0} s, {}",
            kernel.release,
            if cells.iter().all(|(_, c)| c.is_ok()) {
                "all passed"
            } else {
                "FAILED"
            }
        );
        rows.push(Row {
            kernel: format!("{} ({}; {seconds:.0} s)", kernel.release, kernel.who),
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
