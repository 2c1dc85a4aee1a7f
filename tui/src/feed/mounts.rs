//! Filesystem and device block sizes, for the direct-I/O detectors.

use std::{collections::HashMap, ffi::CString, fs, os::unix::ffi::OsStrExt as _, path::Path};

use super::sysfs::{parse_dev, whole_disk};
use crate::model::Dev;

/// Block sizes by device, looked up once each.
#[derive(Default)]
pub struct BlockSizes {
    fs: HashMap<Dev, u32>,
    disks: HashMap<Dev, (Dev, u32, u32)>,
}

impl BlockSizes {
    /// The block size of the filesystem mounted from `dev` (0 when not found).
    pub fn fs_block_size(&mut self, dev: Dev) -> u32 {
        *self.fs.entry(dev).or_insert_with(|| {
            mount_point(dev)
                .and_then(|path| statvfs_block_size(&path))
                .unwrap_or(0)
        })
    }

    /// `(whole disk, logical, physical block size)` of a (partition) device.
    pub fn disk(&mut self, dev: Dev) -> (Dev, u32, u32) {
        *self.disks.entry(dev).or_insert_with(|| {
            let disk = whole_disk(dev);
            let read = |what: &str| {
                fs::read_to_string(format!("/sys/dev/block/{disk}/queue/{what}"))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0)
            };
            (
                disk,
                read("logical_block_size"),
                read("physical_block_size"),
            )
        })
    }
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

fn unescape(text: &str) -> String {
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
    fn the_root_filesystem_has_a_block_size() {
        assert!(statvfs_block_size("/").is_some_and(|bs| bs >= 512));
    }
}
