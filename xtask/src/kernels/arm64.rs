//! The arm64 guests: Debian's arm64 kernel under qemu-system-aarch64 (TCG, one thread, a
//! Neoverse N1 as in Graviton2), booted straight into an initramfs of busybox, the static
//! aarch64 iotop-bpf, the as-nobody helper, the kernel's own loop and ext4 modules and an
//! ext4 image made here. Its /init (`arm64-init.sh`) runs `check` and the smoke set's
//! workloads and prints the results on the serial console; the smoke set judges them here.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::{Context, Result, bail};

use super::{Kernel, dir};
use crate::{
    dist,
    target::Target,
    util::{cmd, download, run, stdout_of},
};

const BUSYBOX: (&str, &str) = (
    "http://deb.debian.org/debian/pool/main/b/busybox/busybox-static_1.35.0-4%2bdeb12u1%2bb1_arm64.deb",
    "732c9135564fc71337e0e05fb4da4d11e6c28c1834bce3e405e575afef2a52f5",
);

const INIT: &str = include_str!("arm64-init.sh");

/// The modules the guest loads (with what they need, from modules.dep).
/// ext4 asks the crypto API for crc32c when it mounts (not a modules.dep dependency).
const MODULES: &[&str] = &["crc32c_generic", "loop", "ext4"];

/// A guest's time limit: boot, `check`, two runs of the workloads under emulation.
const TIMEOUT_S: u32 = 1500;

/// What the arm64 guests run, built for aarch64: the tool and the tests crate's helpers.
pub struct Binaries {
    tool: PathBuf,
    as_nobody: PathBuf,
    dsync_writes: PathBuf,
}

impl Binaries {
    pub fn build() -> Result<Self> {
        let tool = dist::build_static(Target::Aarch64)?;
        let env = Target::Aarch64.build_env()?;
        run(cmd("cargo").envs(env).args([
            "build",
            "--release",
            "--target",
            Target::Aarch64.triple(),
            "--package",
            "iotop-bpf-integration",
            "--bin",
            "as-nobody",
            "--bin",
            "dsync-writes",
        ]))?;
        Ok(Self {
            as_nobody: tool.with_file_name("as-nobody"),
            dsync_writes: tool.with_file_name("dsync-writes"),
            tool,
        })
    }
}

/// Boots `kernel` (its packages extracted in `root`, its image `image`) with `binaries`, and
/// leaves the guest's files in `out`.
pub fn boot(
    kernel: &Kernel,
    root: &Path,
    image: &Path,
    binaries: &Binaries,
    out: &Path,
) -> Result<()> {
    let initrd = initramfs(kernel, root, binaries)?;
    let console = out.join("console.log");
    let mut command = cmd("timeout");
    command
        .arg(TIMEOUT_S.to_string())
        .arg("qemu-system-aarch64")
        .args(["-M", "virt", "-cpu", "neoverse-n1", "-m", "2G", "-smp", "2"])
        // Multi-threaded TCG panicked an x86-64 guest while tracepoints were patched.
        .args(["-accel", "tcg,thread=single", "-nographic", "-no-reboot"])
        .arg("-kernel")
        .arg(image)
        .arg("-initrd")
        .arg(&initrd)
        .arg("-append")
        .arg(format!("console=ttyAMA0 panic=-1 {}", kernel.append).trim_end())
        .stdin(Stdio::null())
        .stdout(fs::File::create(&console)?)
        .stderr(fs::File::create(out.join("qemu.err"))?);
    let status = command.status()?;
    let text = String::from_utf8_lossy(&fs::read(&console)?).replace('\r', "");
    let files = unpack(&text, out)?;
    if !text.contains("==KM-DONE==") {
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        bail!(
            "the guest did not finish ({status}, {files} files back); console ends: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    Ok(())
}

/// Writes the files the guest printed (gzipped, base64, between markers) into `out`;
/// returns how many.
fn unpack(console: &str, out: &Path) -> Result<usize> {
    let mut count = 0;
    let mut lines = console.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .strip_prefix("==KM-BEGIN ")
            .and_then(|n| n.strip_suffix("=="))
        else {
            continue;
        };
        let encoded: String = lines
            .by_ref()
            .take_while(|l| *l != "==KM-END==")
            .collect::<Vec<_>>()
            .join("\n");
        let path = out.join(name);
        let gz = out.join(format!("{name}.gz"));
        run(cmd("base64")
            .args(["-d", "-i"])
            .stdin(pipe_from(&encoded, out)?)
            .stdout(fs::File::create(&gz)?))?;
        run(cmd("gzip").args(["-d", "-f"]).arg(&gz))?;
        if path.exists() {
            count += 1;
        }
    }
    let _ = fs::remove_file(out.join(".base64"));
    Ok(count)
}

/// `text` as a file to read from (a temporary one in `dir`).
fn pipe_from(text: &str, dir: &Path) -> Result<fs::File> {
    let path = dir.join(".base64");
    fs::write(&path, text)?;
    Ok(fs::File::open(path)?)
}

/// The initramfs: busybox, the tool (stripped), the helper, the modules, an ext4 image and
/// /init; returns its path.
fn initramfs(kernel: &Kernel, root: &Path, binaries: &Binaries) -> Result<PathBuf> {
    let r = dir().join(format!("initramfs-{}", kernel.name));
    if r.exists() {
        fs::remove_dir_all(&r)?;
    }
    for d in ["bin", "dev", "proc", "sys", "tmp", "mnt", "modules", "out"] {
        fs::create_dir_all(r.join(d))?;
    }
    let busybox = dir().join("busybox-arm64");
    if !busybox.join("bin/busybox").exists() {
        let deb = download(BUSYBOX.0, BUSYBOX.1, &dir().join("debs"))?;
        run(cmd("dpkg-deb").arg("-x").arg(&deb).arg(&busybox))?;
    }
    fs::copy(busybox.join("bin/busybox"), r.join("bin/busybox"))?;
    std::os::unix::fs::symlink("busybox", r.join("bin/sh"))?;
    // The console, before devtmpfs is mounted over /dev.
    run(cmd("mknod")
        .arg(r.join("dev/console"))
        .args(["c", "5", "1"]))?;
    let llvm_strip = Path::new(crate::setup::LLVM_PREFIX).join("bin/llvm-strip");
    for (from, to) in [
        (&binaries.tool, "bin/iotop-bpf"),
        (&binaries.as_nobody, "bin/as-nobody"),
        (&binaries.dsync_writes, "bin/dsync-writes"),
    ] {
        run(cmd(&llvm_strip)
            .arg("--strip-unneeded")
            .arg(from)
            .arg("-o")
            .arg(r.join(to)))?;
    }
    fs::write(r.join("init"), INIT)?;
    run(cmd("chmod").arg("0755").arg(r.join("init")))?;
    modules(kernel, root, &r.join("modules"))?;
    fs::copy(ext4_image()?, r.join("ext4.img.gz"))?;
    let initrd = dir().join(format!("initrd-{}.gz", kernel.name));
    run(cmd("sh")
        .arg("-c")
        .arg("find . | cpio -o -H newc --quiet | gzip -1")
        .current_dir(&r)
        .stdout(fs::File::create(&initrd)?))?;
    Ok(initrd)
}

/// The kernel's loop and ext4 modules and what they need, uncompressed into `to`, listed
/// in the order to load them in `to/order`. The package has no modules.dep (its postinst
/// runs depmod): the host's depmod makes one, arm64 modules or not.
fn modules(kernel: &Kernel, root: &Path, to: &Path) -> Result<()> {
    let moddir = root.join("lib/modules").join(kernel.release);
    if !moddir.join("modules.dep").exists() {
        run(cmd("depmod").arg("-b").arg(root).arg(kernel.release))?;
    }
    let deps = fs::read_to_string(moddir.join("modules.dep"))?;
    let mut order: Vec<String> = Vec::new();
    for module in MODULES {
        closure(&deps, module, &mut order)
            .with_context(|| format!("module {module} of Linux {}", kernel.release))?;
    }
    let mut names = String::new();
    for path in &order {
        let file = Path::new(path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = format!("{}.ko", file.split(".ko").next().unwrap_or(&file));
        let from = moddir.join(path);
        let dest = fs::File::create(to.join(&name))?;
        match Path::new(path).extension().and_then(|e| e.to_str()) {
            Some("xz") => run(cmd("xz").arg("-dc").arg(&from).stdout(dest))?,
            Some("zst") => run(cmd("zstd").arg("-qdc").arg(&from).stdout(dest))?,
            _ => {
                drop(dest);
                fs::copy(&from, to.join(&name))?;
            }
        }
        names.push_str(&name);
        names.push('\n');
    }
    fs::write(to.join("order"), names)?;
    Ok(())
}

/// Appends `module`'s dependencies, then `module`, to `order` (paths in modules.dep), once
/// each; a module built into the kernel (not in modules.dep) adds nothing.
fn closure(deps: &str, module: &str, order: &mut Vec<String>) -> Result<()> {
    let line = deps.lines().find(|l| {
        l.split(':')
            .next()
            .and_then(|p| p.rsplit('/').next())
            .is_some_and(|f| f.split(".ko").next() == Some(module))
    });
    let Some(line) = line else {
        return Ok(());
    };
    let (path, needs) = line.split_once(':').unwrap_or((line, ""));
    for need in needs.split_whitespace() {
        let name = need.rsplit('/').next().unwrap_or(need);
        closure(deps, name.split(".ko").next().unwrap_or(name), order)?;
    }
    if !order.iter().any(|p| p == path) {
        order.push(path.to_string());
    }
    Ok(())
}

/// A 256 MiB ext4 image, gzipped (busybox cannot make one), made once.
fn ext4_image() -> Result<PathBuf> {
    let gz = dir().join("ext4.img.gz");
    if !gz.exists() {
        let img = dir().join("ext4.img");
        let _ = fs::remove_file(&img);
        run(cmd("truncate").args(["-s", "256M"]).arg(&img))?;
        stdout_of(cmd("mkfs.ext4").args(["-q", "-F"]).arg(&img))?;
        run(cmd("gzip").args(["-9", "-f"]).arg(&img))?;
    }
    Ok(gz)
}
