//! Filesystem and device geometry, from the kernel: block sizes of mounted filesystems
//! (`statvfs`), block sizes of disks (sysfs), and where a partition starts on its disk. Never
//! a constant: the detectors judge every request against these.

use std::{
    collections::HashMap, ffi::CString, fs, os::fd::AsRawFd as _, os::unix::ffi::OsStrExt as _,
    path::Path,
};

use super::sysfs::{parse_dev, whole_disk};
use crate::model::{Dev, DiskGeometry};

/// A failed lookup is tried again after this long (the filesystem may be mounted later).
const RETRY_NS: u64 = 1_000_000_000;
/// Devices remembered (a bound; devices come and go with loop devices and hotplug).
const MAX_DEVICES: usize = 4_096;

/// A (partition) device's place on its disk and the disk's block sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskInfo {
    pub disk: Dev,
    /// Where the device starts on `disk`, in 512-byte sectors (0 for a whole disk).
    pub start_sector: u64,
    pub logical_block_size: u32,
    pub physical_block_size: u32,
    pub minimum_io_size: u32,
    /// The device honours FUA writes (`queue/fua`).
    pub fua: bool,
}

/// Block sizes by device, looked up once each (a failed filesystem lookup is retried).
#[derive(Default)]
pub struct BlockSizes {
    fs: HashMap<Dev, Result<u32, u64>>,
    disks: HashMap<Dev, DiskInfo>,
}

impl BlockSizes {
    /// The block size of the filesystem mounted from `dev`; `None` when it cannot be found
    /// now (tried again a second later, not remembered as 0).
    pub fn fs_block_size(&mut self, dev: Dev, now_ns: u64) -> Option<u32> {
        match self.fs.get(&dev) {
            Some(Ok(size)) => return Some(*size),
            Some(Err(failed_at)) if now_ns.saturating_sub(*failed_at) < RETRY_NS => return None,
            _ => {}
        }
        if self.fs.len() >= MAX_DEVICES {
            self.fs.clear();
        }
        let found = mount_point(dev).and_then(|path| statvfs_block_size(&path));
        self.fs.insert(dev, found.ok_or(now_ns));
        found
    }

    /// Where a (partition) device lies and its disk's block sizes.
    pub fn disk(&mut self, dev: Dev) -> DiskInfo {
        if self.disks.len() >= MAX_DEVICES {
            self.disks.clear();
        }
        *self.disks.entry(dev).or_insert_with(|| {
            let disk = whole_disk(dev);
            let queue = |what: &str| read_number(&format!("/sys/dev/block/{disk}/queue/{what}"));
            DiskInfo {
                disk,
                start_sector: if disk == dev {
                    0
                } else {
                    read_number(&format!("/sys/dev/block/{dev}/start"))
                },
                logical_block_size: u32::try_from(queue("logical_block_size")).unwrap_or(0),
                physical_block_size: u32::try_from(queue("physical_block_size")).unwrap_or(0),
                minimum_io_size: u32::try_from(queue("minimum_io_size")).unwrap_or(0),
                fua: queue("fua") == 1,
            }
        })
    }

    /// The geometry of the named disks.
    pub fn geometry(&mut self, names: &[(Dev, String)]) -> Vec<DiskGeometry> {
        names
            .iter()
            .map(|&(dev, _)| {
                let info = self.disk(dev);
                DiskGeometry {
                    dev,
                    logical_block_size: info.logical_block_size,
                    physical_block_size: info.physical_block_size,
                    minimum_io_size: info.minimum_io_size,
                    fua: info.fua,
                }
            })
            .collect()
    }

    /// The largest filesystem block or physical block size among the mounted block
    /// filesystems (at least 512): direct I/O aligned to it cannot cause sub-block zeroing or
    /// a read-modify-write anywhere.
    pub fn largest_block_in_use(&mut self) -> u64 {
        let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut largest = 512u64;
        for (dev, point) in block_mounts(&text) {
            if let Some(size) = statvfs_block_size(&point) {
                largest = largest.max(u64::from(size));
                self.fs.insert(dev, Ok(size));
            }
            largest = largest.max(u64::from(self.disk(dev).physical_block_size));
        }
        largest.next_power_of_two()
    }
}

fn read_number(path: &str) -> u64 {
    fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Tells when the mount table changed (`/proc/self/mountinfo` signals it with POLLPRI).
pub struct MountWatch {
    file: Option<fs::File>,
    first: bool,
}

impl MountWatch {
    pub fn open() -> Self {
        Self {
            file: fs::File::open("/proc/self/mountinfo").ok(),
            first: true,
        }
    }

    /// True the first time, then whenever a filesystem was mounted or unmounted since the
    /// previous call (always true when the file could not be watched).
    pub fn changed(&mut self) -> bool {
        if std::mem::take(&mut self.first) {
            return true;
        }
        let Some(file) = &self.file else { return true };
        let mut poll = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        // The kernel re-arms the notification when it reports it (mounts_poll).
        ready > 0 && poll.revents & (libc::POLLPRI | libc::POLLERR) != 0
    }
}

/// (device, mount point) of the mounts backed by a block device.
fn block_mounts(mountinfo: &str) -> Vec<(Dev, String)> {
    let mut seen: Vec<Dev> = Vec::new();
    mountinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let dev = parse_dev(fields.nth(2)?)?;
            let point = unescape(fields.nth(1)?);
            (dev.major != 0
                && !seen.contains(&dev)
                && Path::new(&format!("/sys/dev/block/{dev}")).exists())
            .then(|| {
                seen.push(dev);
                (dev, point)
            })
        })
        .collect()
}

/// The first mount point of `dev` in /proc/self/mountinfo.
fn mount_point(dev: Dev) -> Option<String> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse_mount_point(&text, dev)
}

/// Field 3 is `major:minor`, field 5 the mount point (with `\\040`-style escapes).
pub fn parse_mount_point(mountinfo: &str, dev: Dev) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let devno = fields.nth(2)?;
        let point = fields.nth(1)?;
        (parse_dev(devno)? == dev).then(|| unescape(point))
    })
}

pub(super) fn unescape(text: &str) -> String {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4].iter().all(u8::is_ascii_digit)
            && let Ok(code) = u8::from_str_radix(&text[i + 1..i + 4], 8)
        {
            out.push(code);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn statvfs_block_size(path: &str) -> Option<u32> {
    let c_path = CString::new(Path::new(path).as_os_str().as_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a valid out-pointer.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    u32::try_from(stat.f_bsize).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_from_mountinfo() {
        let text = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                    99 22 7:3 / /mnt/with\\040space rw - xfs /dev/loop3 rw\n";
        assert_eq!(
            parse_mount_point(text, Dev::new(254, 0)).as_deref(),
            Some("/")
        );
        assert_eq!(
            parse_mount_point(text, Dev::new(7, 3)).as_deref(),
            Some("/mnt/with space")
        );
        assert_eq!(parse_mount_point(text, Dev::new(8, 0)), None);
    }

    #[test]
    fn block_mounts_skip_virtual_filesystems_and_repeats() {
        let text = "22 1 0:21 / /proc rw - proc proc rw\n\
                    23 1 259:99999 / /a rw - ext4 /dev/x rw\n";
        assert!(
            block_mounts(text).is_empty(),
            "no such block device, or not a block device"
        );
    }

    #[test]
    fn the_root_filesystem_has_a_block_size() {
        assert!(statvfs_block_size("/").is_some_and(|bs| bs >= 512));
    }
}
