//! Scratch filesystems on loop devices, written once for the demo (`iotop-bpf demo`), the
//! privileged tests (`tests/`) and the bench (`cargo xtask bench`, a bare device): a file in
//! /dev/shm (so the loop device's own backing I/O causes no further block I/O), a loop device
//! over it, and a filesystem on it mounted in the temporary directory. Everything is undone
//! on drop, in reverse. A crate of its own, with no dependency, so that each of them (the
//! binary, the tests, xtask) can use it without the others.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// Runs a set-up command, saying which and why it failed; its output on success.
pub fn sh(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {program} (is it installed?): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Where backing files go: /dev/shm, else the temporary directory.
pub fn backing_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A loop device over a new sparse file. Detached, and the file removed, on drop.
#[derive(Debug)]
pub struct LoopDevice {
    /// `/dev/loop7`.
    pub device: String,
    /// `loop7`.
    pub name: String,
    /// `major:minor`, as the JSON reports devices (empty when sysfs does not say).
    pub dev: String,
    backing: PathBuf,
}

impl LoopDevice {
    /// A loop device (buffered: `--direct-io=off`) over a new sparse file of `bytes` at
    /// `backing`.
    pub fn create(backing: PathBuf, bytes: u64) -> Result<Self, String> {
        let sized = std::fs::File::create(&backing)
            .map_err(|e| format!("create {}: {e}", backing.display()))
            .and_then(|file| {
                file.set_len(bytes)
                    .map_err(|e| format!("size {}: {e}", backing.display()))
            });
        let attached = sized.and_then(|()| {
            sh(
                "losetup",
                &[
                    "-f",
                    "--show",
                    "--direct-io=off",
                    &backing.to_string_lossy(),
                ],
            )
        });
        let device = match attached {
            Ok(device) => device,
            Err(e) => {
                let _ = std::fs::remove_file(&backing);
                return Err(e);
            }
        };
        let name = device.trim_start_matches("/dev/").to_string();
        let dev = std::fs::read_to_string(format!("/sys/class/block/{name}/dev"))
            .unwrap_or_default()
            .trim()
            .to_string();
        Ok(Self {
            device,
            name,
            dev,
            backing,
        })
    }

    /// No I/O scheduler: a loop device keeps the one its last user set (a test's
    /// mq-deadline), and costs more per request with one.
    pub fn scheduler_none(&self) -> std::io::Result<()> {
        std::fs::write(format!("/sys/block/{}/queue/scheduler", self.name), "none")
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = sh("losetup", &["-d", &self.device]);
        let _ = std::fs::remove_file(&self.backing);
    }
}

/// A filesystem on a [`LoopDevice`], mounted. Unmounted (lazily if something still holds
/// it), its mount point removed, and the device detached, on drop.
#[derive(Debug)]
pub struct LoopFs {
    /// `/dev/loop7`.
    pub device: String,
    /// `major:minor`, as the JSON reports devices.
    pub dev: String,
    /// `loop7`.
    pub name: String,
    pub mountpoint: PathBuf,
    mounted: bool,
    // Dropped after the unmount above.
    loop_device: LoopDevice,
}

impl LoopFs {
    /// `fs` (`ext4`, `xfs` or `btrfs`) of `size_mib` MiB named `tag`: its backing file
    /// `tag.img` in [`backing_dir`], its mount point `tag` in the temporary directory.
    /// `block`: its block size (btrfs: its sector size, the unit of data extents), else
    /// mkfs's own choice (mke2fs picks 1 KiB below 512 MiB: give it for ext4).
    pub fn create(tag: &str, fs: &str, size_mib: u64, block: Option<u32>) -> Result<Self, String> {
        if !matches!(fs, "ext4" | "xfs" | "btrfs") {
            return Err(format!("unsupported filesystem {fs}"));
        }
        let loop_device =
            LoopDevice::create(backing_dir().join(format!("{tag}.img")), size_mib << 20)?;
        // Owned from here: a failing mkfs or mount detaches the device on the way out.
        let mut me = Self {
            device: loop_device.device.clone(),
            dev: loop_device.dev.clone(),
            name: loop_device.name.clone(),
            mountpoint: std::env::temp_dir().join(tag),
            mounted: false,
            loop_device,
        };
        let device = me.device.clone();
        let mut args: Vec<String> =
            vec!["-q".into(), if fs == "ext4" { "-F" } else { "-f" }.into()];
        match (fs, block) {
            ("ext4", Some(block)) => args.extend(["-b".into(), block.to_string()]),
            ("xfs", Some(block)) => args.extend(["-b".into(), format!("size={block}")]),
            ("btrfs", Some(block)) => args.extend(["-s".into(), block.to_string()]),
            _ => {}
        }
        if fs == "ext4" {
            args.extend(["-E".into(), "lazy_itable_init=0,lazy_journal_init=0".into()]);
        }
        args.push(device.clone());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        sh(&format!("mkfs.{fs}"), &args)?;
        std::fs::create_dir_all(&me.mountpoint)
            .map_err(|e| format!("create {}: {e}", me.mountpoint.display()))?;
        sh("mount", &[&device, &me.mountpoint.to_string_lossy()])?;
        me.mounted = true;
        Ok(me)
    }

    /// A path on the filesystem.
    pub fn path(&self, file: &str) -> PathBuf {
        self.mountpoint.join(file)
    }

    /// See [`LoopDevice::scheduler_none`].
    pub fn scheduler_none(&self) -> std::io::Result<()> {
        self.loop_device.scheduler_none()
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let target = self.mountpoint.to_string_lossy().into_owned();
            if sh("umount", &[&target]).is_err() {
                // Something still holds it (a child that would not die): detach it lazily.
                let _ = sh("umount", &["-l", &target]);
            }
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
}
