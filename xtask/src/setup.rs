//! `cargo xtask setup`: install what a fresh Debian 12 machine lacks to build and test
//! iotop-bpf. Every step checks first, so a second run only prints `ok:` lines.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::{as_root, cmd, describe, find_in_path, run, stdout_of};

/// bpf-linker links against these (Debian 12 ships LLVM 14; LLVM 22 matches nightly's);
/// musl-tools compiles zstd's C for the static x86-64 binary, clang for the aarch64 one
/// (with musl's arm64 headers, fetched by `target.rs`), and qemu-user-static runs the
/// aarch64 binary here (its man pages, a replay check).
const BUILD_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
    "musl-tools",
    "clang",
    "qemu-user-static",
];
/// mkfs.xfs, fio, mkfs.ext4, losetup and setpriv for the privileged integration tests; tmux
/// for the live view's; man and systemd-analyze for the package check; the real programs of
/// the evaluation corpus (tests/corpus: sqlite3, python3, PostgreSQL and pgbench,
/// redis-server and redis-benchmark, etcd, MariaDB, git, rsync, sysbench, LMDB through python3-lmdb,
/// zstd;
/// mkfs.btrfs for its btrfs runs;
/// strace and filefrag, from e2fsprogs, are its oracles); chromium renders the HTML report
/// in the report's; bpftrace is the peer the btt test checks its scheduler split against
/// (and the bench's side-by-side peer). Installing postgresql, redis-server, etcd-server and
/// mariadb-server starts their default services where systemd runs (ports 5432, 6379, 2379
/// and 3306); the corpus runs private instances on unix sockets and does not use them.
const TEST_PACKAGES: &[&str] = &[
    "bpftrace",
    "xfsprogs",
    "btrfs-progs",
    "fio",
    "e2fsprogs",
    "util-linux",
    "tmux",
    "man-db",
    "systemd",
    "sqlite3",
    "python3",
    "postgresql",
    "redis-server",
    "etcd-server",
    "mariadb-server",
    "git",
    "rsync",
    "sysbench",
    "python3-lmdb",
    "zstd",
    "strace",
    "chromium",
];
/// Installed without their recommendations: the exporter's end-to-end test runs a private
/// Prometheus and promtool, and prometheus recommends a node exporter that would start as a
/// service.
const TEST_PACKAGES_ALONE: &[&str] = &["prometheus"];
/// What only `cargo xtask bench` needs beyond the tests' packages.
/// The bench's peers beyond bpftrace: biolatency and biotop (CO-RE builds).
const BENCH_PACKAGES: &[&str] = &["libbpf-tools"];
pub const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

/// What is set up: building and running need the toolchain alone; the tests add their
/// tools and the kernel matrix's QEMU; the bench its peers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Build,
    Test,
    Bench,
}

pub fn setup(scope: Scope) -> Result<()> {
    nightly().context("setting up the nightly toolchain")?;
    packages(scope).context("installing Debian packages")?;
    bpf_linker().context("installing bpf-linker")?;
    Ok(())
}

fn install(what: &str, command: &mut Command) -> Result<()> {
    println!("installing {what}: {}", describe(command));
    run(command)
}

/// The eBPF crate is built with `-Z build-std=core`, which needs nightly and its rust-src.
fn nightly() -> Result<()> {
    if find_in_path("rustup").is_none() {
        bail!("rustup is not on PATH: install it from https://rustup.rs and rerun");
    }
    let toolchains = stdout_of(cmd("rustup").args(["toolchain", "list"]))?;
    // `nightly-<host>`, not a dated `nightly-2025-01-01-<host>` pinned by someone else.
    let has_nightly = toolchains.lines().any(|line| {
        line.strip_prefix("nightly-")
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
    });
    if has_nightly {
        println!("ok: nightly toolchain");
    } else {
        install(
            "nightly toolchain",
            cmd("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]),
        )?;
    }
    let components = stdout_of(cmd("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))?;
    if components
        .lines()
        .any(|line| line.trim().starts_with("rust-src"))
    {
        println!("ok: rust-src for nightly");
    } else {
        install(
            "rust-src for nightly",
            cmd("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]),
        )?;
    }
    Ok(())
}

fn deb_installed(package: &str) -> bool {
    cmd("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|out| out.stdout == b"install ok installed")
}

fn packages(scope: Scope) -> Result<()> {
    let mut wanted = BUILD_PACKAGES.to_vec();
    if scope != Scope::Build {
        wanted.extend_from_slice(TEST_PACKAGES);
        wanted.extend_from_slice(crate::kernels::PACKAGES);
    }
    if scope == Scope::Bench {
        wanted.extend_from_slice(BENCH_PACKAGES);
    }
    let alone: &[&str] = if scope == Scope::Build {
        &[]
    } else {
        TEST_PACKAGES_ALONE
    };
    if find_in_path("dpkg-query").is_none() {
        bail!(
            "dpkg-query not found: setup knows Debian/Ubuntu only; install the equivalents of {} {} by hand",
            wanted.join(" "),
            alone.join(" ")
        );
    }
    let missing = |wanted: &[&'static str]| -> Vec<&'static str> {
        wanted
            .iter()
            .copied()
            .filter(|p| !deb_installed(p))
            .collect()
    };
    let (missing, missing_alone) = (missing(&wanted), missing(alone));
    if missing.is_empty() && missing_alone.is_empty() {
        println!(
            "ok: Debian packages {} {}",
            wanted.join(" "),
            alone.join(" ")
        );
        return Ok(());
    }
    let mut update = as_root("apt-get", &[])?;
    update.arg("update");
    println!("updating the package lists: {}", describe(&update));
    run(&mut update)?;
    for (packages, extra) in [
        (missing, &[][..]),
        (missing_alone, &["--no-install-recommends"][..]),
    ] {
        if packages.is_empty() {
            continue;
        }
        let mut apt_install = as_root("apt-get", &[("DEBIAN_FRONTEND", "noninteractive")])?;
        apt_install
            .args(["install", "-y"])
            .args(extra)
            .args(&packages);
        println!(
            "installing Debian packages {}: {}",
            packages.join(" "),
            describe(&apt_install)
        );
        run(&mut apt_install)?;
    }
    Ok(())
}

/// The libLLVM a dynamically linked bpf-linker loads, e.g. `libLLVM.so.22.1`.
fn linked_llvm(path: &std::path::Path) -> Option<String> {
    let ldd = stdout_of(cmd("ldd").arg(path)).ok()?;
    ldd.lines()
        .filter_map(|line| line.split_whitespace().next())
        .find(|lib| lib.starts_with("libLLVM"))
        .map(str::to_owned)
}

/// bpf-linker must be built against the LLVM of nightly's rustc (22); there is no prebuilt
/// download reachable here, so it is compiled (about 1.5 min).
fn bpf_linker() -> Result<()> {
    let mut force = false;
    if let Some(path) = find_in_path("bpf-linker") {
        match stdout_of(cmd(&path).arg("--version")) {
            Ok(version) => match linked_llvm(&path) {
                Some(lib) if lib.contains("-22") || lib.contains(".so.22") => {
                    println!("ok: {} at {} (links {lib})", version.trim(), path.display());
                    return Ok(());
                }
                Some(lib) => {
                    println!(
                        "bpf-linker at {} links {lib}, not LLVM 22: rebuilding it",
                        path.display()
                    );
                    force = true;
                }
                None => {
                    // Statically linked: ldd cannot tell the LLVM version; trust that it runs.
                    println!(
                        "ok: {} at {} (LLVM linked statically)",
                        version.trim(),
                        path.display()
                    );
                    return Ok(());
                }
            },
            Err(err) => {
                println!(
                    "bpf-linker at {} does not run ({err:#}): rebuilding it",
                    path.display()
                );
                force = true;
            }
        }
    }
    let mut path = std::ffi::OsString::from(format!("{LLVM_PREFIX}/bin:"));
    path.push(crate::util::child_path());
    let mut command = cmd("cargo");
    command
        .env("LLVM_PREFIX", LLVM_PREFIX)
        .env("PATH", path)
        .args([
            "install",
            "bpf-linker",
            "--no-default-features",
            "--features",
            "llvm-22",
        ]);
    if force {
        command.arg("--force");
    }
    install("bpf-linker", &mut command)?;
    let Some(path) = find_in_path("bpf-linker") else {
        bail!("`cargo install` succeeded but bpf-linker is not in ~/.cargo/bin or on PATH");
    };
    stdout_of(cmd(&path).arg("--version")).context("the new bpf-linker does not run")?;
    Ok(())
}
