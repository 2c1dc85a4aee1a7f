//! `cargo xtask dist`: for x86-64 and aarch64 each, a Debian package of the static release
//! binary (eBPF object embedded), its man pages and shell completions (generated from the
//! CLI by the binary itself, through qemu-user for aarch64), the systemd unit, the Grafana
//! dashboard and the README, built with `dpkg-deb --build --root-owner-group` (no
//! debhelper); and a tarball of the same. The binary is static: the package needs nothing
//! where it is installed.
//!
//! `cargo xtask dist --check` (and `cargo xtask test`) then installs this machine's package
//! with `dpkg -i`, checks what a user would (`iotop-bpf --version`, `man -w iotop-bpf`,
//! completions, the unit), and removes and purges it again; the other architecture's
//! binary replays a recording under qemu-user exactly as this machine's does.

use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::{
    target::Target,
    util::{as_root, cmd, find_in_path, root_dir, run, stdout_of},
};

const PACKAGE: &str = "iotop-bpf";
const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(clap::Args)]
pub struct Args {
    /// Then install the package with dpkg, check it, and remove and purge it (needs root).
    #[arg(long)]
    pub check: bool,
    /// Only this architecture (default: both).
    #[arg(long, value_enum)]
    pub target: Option<Target>,
}

/// Builds the static binary for `target` (musl, with the eBPF object embedded): what the
/// package and the tarball ship, and what the kernel matrix runs. It runs on any Linux of
/// its architecture, whatever its C library (Debian 11's glibc 2.31, Alpine's musl).
pub fn build_static(target: Target) -> Result<PathBuf> {
    let env = target.build_env()?;
    run(cmd("cargo").envs(env).args([
        "build",
        "--release",
        "--target",
        target.triple(),
        "--package",
        PACKAGE,
    ]))?;
    let binary = target.binary();
    let dump = stdout_of(cmd(llvm("objdump")).arg("-p").arg(&binary))?;
    if dump.lines().any(|l| l.trim().starts_with("NEEDED")) {
        bail!("{} is not static:\n{dump}", binary.display());
    }
    let file = stdout_of(cmd("file").arg("-b").arg(&binary)).unwrap_or_default();
    println!("built {}: {}", binary.display(), file.trim());
    Ok(binary)
}

/// LLVM's `tool` (objdump, strip): they read every architecture, binutils only the host's.
fn llvm(tool: &str) -> PathBuf {
    Path::new(crate::setup::LLVM_PREFIX).join(format!("bin/llvm-{tool}"))
}

/// target/dist/iotop-bpf-VERSION-ARCH-linux-musl.tar.gz: the static binary, man pages,
/// completions, unit, dashboard and README under one directory.
pub fn build_tarball(target: Target, binary: &Path) -> Result<PathBuf> {
    let dist = root_dir().join("target/dist");
    let name = format!("{PACKAGE}-{VERSION}-{}-linux-musl", target.arch());
    let root = dist.join(&name);
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    let bin = put(&root, PACKAGE, &fs::read(binary)?, 0o755)?;
    run(cmd(llvm("strip")).args(["--strip-unneeded"]).arg(&bin))?;
    let generated = root.join("share");
    stdout_of(target.command(&bin).env("IOTOP_BPF_GENERATE", &generated))
        .context("generate the man pages and completions with the static binary")?;
    let repo = root_dir();
    for (from, to) in [
        ("packaging/systemd/iotop-bpf.service", "iotop-bpf.service"),
        ("packaging/grafana/iotop-bpf.json", "grafana-dashboard.json"),
        ("README.md", "README.md"),
    ] {
        put(&root, to, &fs::read(repo.join(from))?, 0o644)?;
    }
    for page in docs()? {
        let name = page.file_name().unwrap_or_default().to_string_lossy();
        put(&root, &format!("docs/{name}"), &fs::read(&page)?, 0o644)?;
    }
    let tarball = dist.join(format!("{name}.tar.gz"));
    run(cmd("tar")
        .args(["--owner=0", "--group=0", "--numeric-owner", "-czf"])
        .arg(&tarball)
        .arg("-C")
        .arg(&dist)
        .arg(&name))?;
    println!(
        "built {} (static binary {:.1} MiB stripped; tarball {:.1} MiB)",
        tarball.display(),
        fs::metadata(&bin)?.len() as f64 / (1 << 20) as f64,
        fs::metadata(&tarball)?.len() as f64 / (1 << 20) as f64
    );
    Ok(tarball)
}

/// The README's pages (docs/*.md and their pictures), sorted.
fn docs() -> Result<Vec<PathBuf>> {
    let mut pages: Vec<PathBuf> = fs::read_dir(root_dir().join("docs"))
        .context("read docs/")?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md" || e == "png"))
        .collect();
    pages.sort();
    Ok(pages)
}

/// Where each generated or shipped file goes in the package.
const COMPLETIONS: &[(&str, &str)] = &[
    (
        "iotop-bpf.bash",
        "usr/share/bash-completion/completions/iotop-bpf",
    ),
    ("_iotop-bpf", "usr/share/zsh/vendor-completions/_iotop-bpf"),
    (
        "iotop-bpf.fish",
        "usr/share/fish/vendor_completions.d/iotop-bpf.fish",
    ),
];
const UNIT: &str = "usr/lib/systemd/system/iotop-bpf.service";
const DOC: &str = "usr/share/doc/iotop-bpf";
const DASHBOARD: &str = "usr/share/iotop-bpf/grafana/iotop-bpf.json";
/// `systemd-analyze security` exposure (0-100, lower is safer) the unit must stay under.
const MAX_EXPOSURE: u32 = 35;

/// Builds target/dist/iotop-bpf_VERSION_ARCH.deb from `target`'s release binary (ARCH:
/// Debian's name of the target's architecture, not this machine's); returns its path.
pub fn build_deb(target: Target, binary: &Path) -> Result<PathBuf> {
    for tool in ["dpkg-deb", "gzip", "md5sum"] {
        if find_in_path(tool).is_none() {
            bail!(
                "{tool} is missing: the package is built with Debian's own tools (dpkg, gzip, coreutils)"
            );
        }
    }
    let arch = target.deb_arch();
    let dist = root_dir().join("target/dist");
    let name = format!("{PACKAGE}_{VERSION}_{arch}");
    let root = dist.join(&name);
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("clean {}", root.display()))?;
    }
    let generated = dist.join("generated");
    if generated.exists() {
        fs::remove_dir_all(&generated)?;
    }

    let bin = put(&root, "usr/bin/iotop-bpf", &fs::read(binary)?, 0o755)?;
    // Symbols are for debugging the build, not for users: Debian ships binaries stripped.
    run(cmd(llvm("strip")).args(["--strip-unneeded"]).arg(&bin))?;

    // The binary writes its man pages and completions from its own CLI definition.
    put_generated(&root, target.command(binary), &generated)?;

    put_docs(&root)?;

    let depends = depends(binary)?;
    let depends_line = if depends.is_empty() {
        String::new()
    } else {
        format!("Depends: {depends}\n")
    };
    let installed_kib = disk_usage_kib(&root)?;
    let control = format!(
        "Package: {PACKAGE}\n\
         Version: {VERSION}\n\
         Architecture: {arch}\n\
         Maintainer: iotop-bpf developers <iotop-bpf@users.noreply.github.com>\n\
         Installed-Size: {installed_kib}\n\
         {depends_line}\
         Section: admin\n\
         Priority: optional\n\
         Homepage: https://github.com/iotop-bpf/iotop-bpf\n\
         Description: live, top-like view of Linux storage I/O, built on eBPF\n \
         Who does I/O to which disk, how slow it is (queue and device time), who waits on\n \
         the disk (fsync and the write amplification it causes), who is stuck in D state,\n \
         and why: pathological patterns named with evidence and a fix. Also a Prometheus\n \
         exporter (iotop-bpf serve, with a systemd unit and a Grafana dashboard).\n"
    );
    put(&root, "DEBIAN/control", control.as_bytes(), 0o644)?;
    put(
        &root,
        "DEBIAN/postinst",
        MAINTAINER_SCRIPT.as_bytes(),
        0o755,
    )?;
    put(&root, "DEBIAN/postrm", MAINTAINER_SCRIPT.as_bytes(), 0o755)?;
    put(&root, "DEBIAN/prerm", PRERM.as_bytes(), 0o755)?;
    let sums = stdout_of(
        cmd("sh")
            .arg("-c")
            .arg("find usr -type f -print0 | sort -z | xargs -0 md5sum")
            .current_dir(&root),
    )?;
    put(&root, "DEBIAN/md5sums", sums.as_bytes(), 0o644)?;

    let deb = dist.join(format!("{name}.deb"));
    run(cmd("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(&root)
        .arg(&deb))?;
    let size = fs::metadata(&deb)?.len();
    println!(
        "built {} ({:.1} MiB; installs {installed_kib} KiB; depends: {})",
        deb.display(),
        size as f64 / (1 << 20) as f64,
        if depends.is_empty() {
            "nothing"
        } else {
            &depends
        }
    );
    Ok(deb)
}

/// The man pages and shell completions, generated by the release `binary` into `generated`
/// and put in the package under `root` (the man pages gzipped, as Debian ships them).
fn put_generated(root: &Path, mut binary: Command, generated: &Path) -> Result<()> {
    let listed = stdout_of(
        binary
            .env("IOTOP_BPF_GENERATE", generated)
            .current_dir(root_dir()),
    )
    .context("generate the man pages and completions with the release binary")?;
    for (file, dest) in COMPLETIONS {
        put(
            root,
            dest,
            &fs::read(generated.join("completions").join(file))?,
            0o644,
        )?;
    }
    let mut pages = 0;
    for line in listed.lines().filter(|l| l.starts_with("man/")) {
        let page = generated.join(line);
        let file = page.file_name().unwrap_or_default().to_string_lossy();
        let dest = put(
            root,
            &format!("usr/share/man/man1/{file}"),
            &fs::read(&page)?,
            0o644,
        )?;
        // Debian compresses man pages (gzip -9n: no name or time stamp, reproducible).
        run(cmd("gzip").args(["-9nf"]).arg(&dest))?;
        pages += 1;
    }
    if pages == 0 {
        bail!("the binary generated no man page: {listed}");
    }
    Ok(())
}

/// The systemd unit, the Grafana dashboard, the README (gzipped) and the pages it links to,
/// and the copyright, put in the package under `root`.
fn put_docs(root: &Path) -> Result<()> {
    let repo = root_dir();
    put(
        root,
        UNIT,
        &fs::read(repo.join("packaging/systemd/iotop-bpf.service"))?,
        0o644,
    )?;
    put(
        root,
        DASHBOARD,
        &fs::read(repo.join("packaging/grafana/iotop-bpf.json"))?,
        0o644,
    )?;
    let readme = put(
        root,
        &format!("{DOC}/README.md"),
        &fs::read(repo.join("README.md"))?,
        0o644,
    )?;
    run(cmd("gzip").args(["-9nf"]).arg(&readme))?;
    // The pages the README links to, uncompressed so that its links work.
    for page in docs()? {
        let name = page.file_name().unwrap_or_default().to_string_lossy();
        put(
            root,
            &format!("{DOC}/docs/{name}"),
            &fs::read(&page)?,
            0o644,
        )?;
    }
    put(
        root,
        &format!("{DOC}/copyright"),
        COPYRIGHT.as_bytes(),
        0o644,
    )?;
    Ok(())
}

/// `libc6 (>= 2.34), libgcc-s1 (>= 4.2)` from the binary's dynamic section: the libraries it
/// needs and the newest symbol versions it uses from each. Anything else is refused: the
/// package must install on a machine with nothing but a base system.
fn depends(binary: &Path) -> Result<String> {
    let dump = stdout_of(cmd(llvm("objdump")).arg("-p").arg(binary))?;
    // Package -> the newest symbol version any of its libraries is needed at.
    let mut needed: Vec<(&str, Option<(u32, u32)>)> = Vec::new();
    for line in dump.lines() {
        let Some(lib) = line.trim().strip_prefix("NEEDED") else {
            continue;
        };
        let lib = lib.trim();
        let (package, prefix) = match lib {
            "libc.so.6"
            | "libm.so.6"
            | "libpthread.so.0"
            | "libdl.so.2"
            | "librt.so.1"
            | "ld-linux-x86-64.so.2"
            | "ld-linux-aarch64.so.1" => ("libc6", "GLIBC_"),
            "libgcc_s.so.1" => ("libgcc-s1", "GCC_"),
            other => bail!(
                "the binary needs {other}, which is not in every Debian base system: link it statically or add its package"
            ),
        };
        let version = newest_version(&dump, lib, prefix);
        match needed.iter_mut().find(|(p, _)| *p == package) {
            Some((_, newest)) => *newest = (*newest).max(version),
            None => needed.push((package, version)),
        }
    }
    if needed.is_empty() {
        // Static: nothing.
        return Ok(String::new());
    }
    Ok(needed
        .iter()
        .map(|(package, version)| match version {
            Some((major, minor)) => format!("{package} (>= {major}.{minor})"),
            None => (*package).to_string(),
        })
        .collect::<Vec<_>>()
        .join(", "))
}

/// The highest `PREFIXx.y[.z]` version `objdump -p` lists as required from `lib`.
fn newest_version(dump: &str, lib: &str, prefix: &str) -> Option<(u32, u32)> {
    let mut in_lib = false;
    let mut best: Option<(u32, u32)> = None;
    for line in dump.lines() {
        let line = line.trim();
        if let Some(from) = line.strip_prefix("required from ") {
            in_lib = from.trim_end_matches(':') == lib;
            continue;
        }
        if !in_lib {
            continue;
        }
        let Some(version) = line
            .split_whitespace()
            .last()
            .and_then(|v| v.strip_prefix(prefix))
        else {
            continue;
        };
        let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
        if let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next()) {
            best = best.max(Some((major, minor)));
        }
    }
    best
}

/// Writes `data` at `root/rel` with `mode`, creating directories (0755); returns the path.
fn put(root: &Path, rel: &str, data: &[u8], mode: u32) -> Result<PathBuf> {
    let path = root.join(rel);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    fs::write(&path, data).with_context(|| format!("write {}", path.display()))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
    Ok(path)
}

fn disk_usage_kib(root: &Path) -> Result<u64> {
    let mut total = 0;
    let mut stack = vec![root.join("usr")];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len().div_ceil(1024);
            }
        }
    }
    Ok(total)
}

/// Reloads systemd's view of the unit files where systemd runs; the service is not enabled
/// or started: exposing metrics is the administrator's decision
/// (`systemctl enable --now iotop-bpf`).
const MAINTAINER_SCRIPT: &str = "#!/bin/sh\nset -e\n\
if [ -d /run/systemd/system ]; then\n    systemctl daemon-reload >/dev/null 2>&1 || true\nfi\n";

const PRERM: &str = "#!/bin/sh\nset -e\n\
if [ -d /run/systemd/system ] && [ \"$1\" = remove ]; then\n    \
systemctl stop iotop-bpf.service >/dev/null 2>&1 || true\nfi\n";

const COPYRIGHT: &str = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
Upstream-Name: iotop-bpf\n\
Source: https://github.com/iotop-bpf/iotop-bpf\n\n\
Files: *\n\
Copyright: the iotop-bpf developers\n\
License: MIT or Apache-2.0\n \
On Debian systems, the full text of the Apache License 2.0 is in\n \
/usr/share/common-licenses/Apache-2.0.\n\n\
Comment: The kernel programs embedded in the binary (the ebpf/ sources)\n \
are licensed under MIT or GPL-2.0, as the kernel requires of programs that\n \
use its GPL-only helpers. On Debian systems, the full text of the GNU General\n \
Public License version 2 is in /usr/share/common-licenses/GPL-2.\n";

/// The package of an architecture this machine cannot install: it says its architecture,
/// and its binary, under qemu-user, replays a recording exactly as this machine's does.
pub fn check_foreign(target: Target, deb: &Path, binary: &Path) -> Result<()> {
    let arch = stdout_of(cmd("dpkg-deb").arg("-f").arg(deb).arg("Architecture"))?;
    if arch.trim() != target.deb_arch() {
        bail!("{} says Architecture: {}", deb.display(), arch.trim());
    }
    let recording = root_dir().join("tui/tests/data/recordings/incident.rec");
    let replay = |mut command: Command| {
        let out = command
            .arg("--replay")
            .arg(&recording)
            .arg("--json")
            .output()?;
        if !out.status.success() {
            bail!(
                "--replay failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(out.stdout)
    };
    let theirs = replay(target.command(binary))?;
    let ours = replay(Target::HOST.command(&Target::HOST.binary()))?;
    if theirs != ours || ours.is_empty() {
        bail!(
            "the {} binary replays {} differently from this machine's",
            target.arch(),
            recording.display()
        );
    }
    println!(
        "ok: {} is {}, and its binary replays {} byte for byte as the {} one ({} bytes)",
        deb.display(),
        target.deb_arch(),
        recording.display(),
        Target::HOST.arch(),
        ours.len()
    );
    Ok(())
}

/// Installs `deb`, checks it as a user would, then removes and purges it.
pub fn check_deb(deb: &Path) -> Result<()> {
    let installed = |package: &str| {
        cmd("dpkg-query")
            .args(["-W", "-f=${Status}", package])
            .output()
            .is_ok_and(|out| {
                out.stdout.ends_with(b"installed") && out.stdout.starts_with(b"install")
            })
    };
    if installed(PACKAGE) {
        bail!(
            "the {PACKAGE} package is already installed here; the check would replace and purge it: remove it first (dpkg -P {PACKAGE})"
        );
    }
    run(as_root("dpkg", &[])?.arg("-i").arg(deb))?;
    let result = check_installed();
    // Remove, then purge, whatever the checks said; report the first failure.
    let removed = run(as_root("dpkg", &[])?.args(["-r", PACKAGE])).and_then(|()| {
        for path in ["/usr/bin/iotop-bpf", &format!("/{UNIT}")] {
            if Path::new(path).exists() {
                bail!("dpkg -r left {path} behind");
            }
        }
        run(as_root("dpkg", &[])?.args(["-P", PACKAGE]))?;
        if installed(PACKAGE) || Path::new(&format!("/{DOC}")).exists() {
            bail!("dpkg -P left the package or /{DOC} behind");
        }
        Ok(())
    });
    result?;
    removed?;
    println!("ok: {} installs, works, and removes cleanly", deb.display());
    Ok(())
}

fn check_installed() -> Result<()> {
    let version = stdout_of(
        Command::new("/usr/bin/iotop-bpf")
            .arg("--version")
            .env_clear(),
    )?;
    if version.trim() != format!("{PACKAGE} {VERSION}") {
        bail!("iotop-bpf --version says {version:?}");
    }
    // Nothing needed where it is installed: the binary is static.
    let dump = stdout_of(cmd("objdump").args(["-p", "/usr/bin/iotop-bpf"]))?;
    if let Some(lib) = dump.lines().find(|l| l.trim().starts_with("NEEDED")) {
        bail!("the installed binary is not static: {}", lib.trim());
    }
    let page = stdout_of(cmd("man").args(["-w", PACKAGE]))?;
    if page.trim() != "/usr/share/man/man1/iotop-bpf.1.gz" {
        bail!("man -w iotop-bpf found {page:?}");
    }
    let serve = stdout_of(
        cmd("man")
            .args(["-P", "cat", "iotop-bpf-serve"])
            .env("MANWIDTH", "100"),
    )?;
    if !serve.contains("--listen") {
        bail!("man iotop-bpf-serve does not show --listen:\n{serve}");
    }
    // bash loads the completion and registers it for the command.
    let complete = stdout_of(cmd("bash").args([
        "-c",
        "source /usr/share/bash-completion/completions/iotop-bpf && complete -p iotop-bpf",
    ]))?;
    if !complete.contains("iotop-bpf") {
        bail!("the bash completion registers nothing: {complete}");
    }
    for (_, dest) in COMPLETIONS {
        let text = fs::read_to_string(format!("/{dest}")).with_context(|| format!("/{dest}"))?;
        if !text.contains("serve") {
            bail!("/{dest} does not complete `serve`");
        }
    }
    for path in [
        format!("/{DOC}/README.md.gz"),
        format!("/{DOC}/copyright"),
        format!("/{DASHBOARD}"),
    ] {
        if !Path::new(&path).is_file() {
            bail!("{path} is missing");
        }
    }
    // systemd parses the unit, finds its binary and its man pages (Documentation=).
    if find_in_path("systemd-analyze").is_some() {
        run(cmd("systemd-analyze").args(["verify", &format!("/{UNIT}")]))?;
        let security = stdout_of(cmd("systemd-analyze").args([
            "security",
            "--offline=true",
            &format!("--threshold={MAX_EXPOSURE}"),
            "--no-pager",
            &format!("/{UNIT}"),
        ]))
        .with_context(|| format!("the unit's exposure level is above {MAX_EXPOSURE} (of 100)"))?;
        println!(
            "ok: systemd-analyze security: {}",
            security.lines().last().unwrap_or("").trim()
        );
    } else {
        bail!("systemd-analyze is missing (package systemd): cannot check the unit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_symbol_version_per_library() {
        let dump = "Version References:\n  required from libgcc_s.so.1:\n    0x0b792650 0x00 04 GCC_3.0\n    0x09276060 0x00 26 GCC_4.2.0\n  required from libm.so.6:\n    0x06969189 0x00 08 GLIBC_2.29\n  required from libc.so.6:\n    0x09691a75 0x00 03 GLIBC_2.2.5\n    0x069691b4 0x00 02 GLIBC_2.34\n    0x069691b2 0x00 20 GLIBC_2.32\n";
        assert_eq!(newest_version(dump, "libc.so.6", "GLIBC_"), Some((2, 34)));
        assert_eq!(newest_version(dump, "libm.so.6", "GLIBC_"), Some((2, 29)));
        assert_eq!(newest_version(dump, "libgcc_s.so.1", "GCC_"), Some((4, 2)));
        assert_eq!(newest_version(dump, "libz.so.1", "ZLIB_"), None);
    }
}
