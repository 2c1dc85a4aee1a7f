//! What /proc tells about the tasks behind events: kernel threads, and the files behind fds.
//! Looked up in user space, once per task or per fd and second, and cached.

use crate::model::FastMap;
use std::{fs, os::unix::fs::MetadataExt as _, path::Path};

use crate::model::{Dev, FileRef};

/// `PF_KTHREAD` in the flags field of /proc/PID/stat.
const PF_KTHREAD: u64 = 0x0020_0000;
/// A resolved fd is trusted this long before it is looked up again (fds get reused).
const FD_TTL_NS: u64 = 1_000_000_000;
/// Caches are trimmed when they grow past this (pid churn without exit records).
const MAX_CACHED: usize = 16_384;

/// Field `n` (1-based, as in proc(5)) of a /proc/PID/stat line; the comm may contain spaces
/// and parentheses, so fields are counted after its closing parenthesis.
pub fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(n.checked_sub(3)?)
}

pub fn is_kernel_thread_stat(stat: &str) -> bool {
    stat_field(stat, 9)
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// The state letter of a /proc/PID/stat line (`R`, `S`, `D`, ...).
pub fn stat_state(stat: &str) -> Option<char> {
    stat_field(stat, 3)?.chars().next()
}

/// A thread found in D state by scanning /proc: (tid, tgid, comm).
pub fn threads_in_d() -> Vec<(u32, u32, String)> {
    let mut found = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return found;
    };
    for proc in procs.flatten() {
        let Ok(tgid) = proc.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(tasks) = fs::read_dir(proc.path().join("task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(tid) = task.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Ok(stat) = fs::read_to_string(task.path().join("stat"))
                && stat_state(&stat) == Some('D')
            {
                let comm = stat
                    .find('(')
                    .zip(stat.rfind(')'))
                    .map_or_else(String::new, |(a, b)| stat[a + 1..b].to_string());
                found.push((tid, tgid, comm));
            }
        }
    }
    found
}

/// The state letter of a thread now (`None` when it is gone).
pub fn thread_state(tid: u32) -> Option<char> {
    stat_state(&fs::read_to_string(format!("/proc/{tid}/stat")).ok()?)
}

/// A file /proc named behind an fd: the file, its filesystem's device and inode, and when.
type FdLookup = (FileRef, Option<(Dev, u64)>, u64);

/// What was learnt from /proc about processes, forgotten when they exit and bounded.
#[derive(Default)]
pub struct ProcCache {
    kernel_threads: FastMap<u32, bool>,
    /// (tgid, fd) -> what it named when looked up.
    fds: FastMap<(u32, i32), FdLookup>,
    /// (tgid, fs device, inode) -> path, found among the process's open fds.
    inodes: FastMap<(u32, Dev, u64), Option<String>>,
    /// (fs device, inode) -> the path a process had it open as: names the files of
    /// processes gone before their fds could be read.
    inode_paths: FastMap<(Dev, u64), String>,
    /// (tgid, address) -> the file mapped there, and when it was looked up.
    mappings: FastMap<(u32, u64), (Option<MappedFile>, u64)>,
}

/// A file mapped into a process: its path, its filesystem's device and its inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    pub path: String,
    pub dev: Dev,
    pub ino: u64,
}

/// The file mapped at `addr` in a /proc/PID/maps text (`start-end perms offset maj:min inode
/// path`, the device in hex); `None` for an anonymous or unmapped address.
pub fn mapped_at(maps: &str, addr: u64) -> Option<MappedFile> {
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let (start, end) = (
            u64::from_str_radix(start, 16).ok()?,
            u64::from_str_radix(end, 16).ok()?,
        );
        if !(start..end).contains(&addr) {
            return None;
        }
        let _perms = fields.next()?;
        let _offset = fields.next()?;
        let (major, minor) = fields.next()?.split_once(':')?;
        let ino: u64 = fields.next()?.parse().ok()?;
        // The path is the rest of the line (it may hold spaces).
        let path = line
            .split_whitespace()
            .skip(5)
            .collect::<Vec<_>>()
            .join(" ");
        let dev = Dev::new(
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        );
        (ino != 0 && path.starts_with('/')).then(|| MappedFile {
            path: path.trim_end_matches(" (deleted)").to_string(),
            dev,
            ino,
        })
    })
}

/// The path of inode `ino` on `dev` among a /proc/PID/maps text's mapped files.
pub fn mapped_path(maps: &str, dev: Dev, ino: u64) -> Option<String> {
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace().skip(3);
        let (major, minor) = fields.next()?.split_once(':')?;
        let found: u64 = fields.next()?.parse().ok()?;
        let at = Dev::new(
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        );
        let path = line
            .split_whitespace()
            .skip(5)
            .collect::<Vec<_>>()
            .join(" ");
        (found == ino && at == dev && path.starts_with('/'))
            .then(|| path.trim_end_matches(" (deleted)").to_string())
    })
}

impl ProcCache {
    /// Whether `tgid` is a kernel thread (false when it is gone: kernel threads rarely exit).
    pub fn is_kernel_thread(&mut self, tgid: u32) -> bool {
        if self.kernel_threads.len() > MAX_CACHED {
            // Kernel threads are few and long-lived: keep them, look user processes up again.
            self.kernel_threads.retain(|_, kthread| *kthread);
        }
        *self.kernel_threads.entry(tgid).or_insert_with(|| {
            fs::read_to_string(format!("/proc/{tgid}/stat"))
                .is_ok_and(|s| is_kernel_thread_stat(&s))
        })
    }

    /// The file behind `fd` of `tgid` and the device of its filesystem. With `expect` (the
    /// filesystem and inode the kernel saw during the call), an fd that now names another
    /// file was closed and its number reused since (a process syncs a file, closes it, opens
    /// /dev/urandom): that is said, not named as the synced file.
    pub fn resolve_fd(
        &mut self,
        tgid: u32,
        fd: i32,
        expect: Option<(Dev, u64)>,
        now_ns: u64,
    ) -> (FileRef, Option<Dev>) {
        // The inode and the device: inode numbers repeat across filesystems (dpkg synced an
        // XFS directory whose number was /etc/group's on the root filesystem, closed it,
        // and had /etc/group open on that fd when it was read, which named every later sync
        // of that directory /etc/group). The device is not compared when the kernel's is
        // anonymous (major 0): btrfs reports a subvolume's own to stat, not the
        // superblock's the kernel saw. When the kernel's is a block device, an anonymous one
        // from stat is another file (a container's overlay root: dpkg's syncs on an ext4
        // scratch root were named /etc/passwd in CI). A path whose inode could not be read
        // (the fd closed between readlink and stat) is not the synced file's either.
        let same = |found: Option<(Dev, u64)>| match (expect, found) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some((want_dev, want)), Some((dev, ino))) => {
                want == ino && (want_dev.major == 0 || want_dev == dev)
            }
        };
        if let Some((file, id, at)) = self.fds.get(&(tgid, fd))
            && now_ns.saturating_sub(*at) < FD_TTL_NS
            && (!matches!(file, FileRef::Path(_)) || same(*id))
        {
            return (file.clone(), id.map(|(dev, _)| dev));
        }
        if self.fds.len() > MAX_CACHED {
            self.fds
                .retain(|_, (_, _, at)| now_ns.saturating_sub(*at) < FD_TTL_NS);
            if self.fds.len() > MAX_CACHED {
                self.fds.clear();
            }
        }
        let link = format!("/proc/{tgid}/fd/{fd}");
        let (file, id) = match fs::read_link(&link) {
            Ok(path) => {
                let id = fs::metadata(&link)
                    .ok()
                    .map(|m| (Dev::from_user(m.dev()), m.ino()));
                (FileRef::Path(path.to_string_lossy().into_owned()), id)
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => (
                FileRef::Unresolved(
                    "another user's fd: naming it needs CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH"
                        .into(),
                ),
                None,
            ),
            Err(_) if !Path::new(&format!("/proc/{tgid}")).exists() => (
                FileRef::Unresolved("process exited before the fd could be read".into()),
                None,
            ),
            Err(_) => (
                FileRef::Unresolved("fd closed before it could be read".into()),
                None,
            ),
        };
        self.fds.insert((tgid, fd), (file.clone(), id, now_ns));
        if matches!(file, FileRef::Path(_)) && !same(id) {
            let why = if id.is_none() {
                "fd closed before it could be read"
            } else {
                "fd reused for another file before it could be read"
            };
            return (FileRef::Unresolved(why.into()), None);
        }
        (file, id.map(|(dev, _)| dev))
    }

    /// The path of inode `ino` on `fs_dev`, if `tgid` has it open (direct I/O records carry
    /// the inode, not the fd).
    pub fn file_of_inode(&mut self, tgid: u32, fs_dev: Dev, ino: u64) -> Option<String> {
        if let Some(path) = self.inodes.get(&(tgid, fs_dev, ino)) {
            return path.clone();
        }
        if self.inodes.len() > MAX_CACHED {
            self.inodes.clear();
        }
        let found = fs::read_dir(format!("/proc/{tgid}/fd"))
            .ok()
            .and_then(|fds| {
                fds.flatten().find_map(|fd| {
                    let meta = fs::metadata(fd.path()).ok()?;
                    (meta.ino() == ino && Dev::from_user(meta.dev()) == fs_dev)
                        .then(|| fs::read_link(fd.path()).ok())
                        .flatten()
                        .map(|p| p.to_string_lossy().into_owned())
                })
            });
        self.inodes.insert((tgid, fs_dev, ino), found.clone());
        found
    }

    /// The file `tgid` has mapped at `addr` (an msync's range), looked up at most once a
    /// second per address.
    pub fn mapped_file(&mut self, tgid: u32, addr: u64, now_ns: u64) -> Option<MappedFile> {
        if let Some((file, at)) = self.mappings.get(&(tgid, addr))
            && now_ns.saturating_sub(*at) < FD_TTL_NS
        {
            return file.clone();
        }
        if self.mappings.len() > MAX_CACHED {
            self.mappings.clear();
        }
        let file = fs::read_to_string(format!("/proc/{tgid}/maps"))
            .ok()
            .and_then(|maps| mapped_at(&maps, addr));
        self.mappings.insert((tgid, addr), (file.clone(), now_ns));
        file
    }

    /// The path some process had inode `ino` of `dev` open as, recently.
    pub fn path_of_inode(&self, dev: Dev, ino: u64) -> Option<String> {
        self.inode_paths.get(&(dev, ino)).cloned()
    }

    pub fn remember_inode_path(&mut self, dev: Dev, ino: u64, path: &str) {
        if ino == 0 {
            return;
        }
        if self.inode_paths.len() >= MAX_CACHED {
            self.inode_paths.clear();
        }
        self.inode_paths.insert((dev, ino), path.to_string());
    }

    /// Forgets an exited process.
    pub fn forget(&mut self, tgid: u32) {
        self.kernel_threads.remove(&tgid);
        self.fds.retain(|(t, _), _| *t != tgid);
        self.inodes.retain(|(t, _, _), _| *t != tgid);
        self.mappings.retain(|(t, _), _| *t != tgid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_survive_odd_comms() {
        let kthread = "585 (jbd2/loop0-8) S 2 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0";
        assert_eq!(stat_field(kthread, 3), Some("S"));
        assert_eq!(stat_field(kthread, 4), Some("2"));
        assert!(
            is_kernel_thread_stat(kthread),
            "2129984 = 0x208040 has PF_KTHREAD"
        );
        let user = "4242 (my (weird) prog) R 1 4242 4242 0 -1 4194560 10 0 0 0 1 2 0 0 20 0 1";
        assert_eq!(stat_field(user, 3), Some("R"));
        assert!(!is_kernel_thread_stat(user));
        assert!(!is_kernel_thread_stat("garbage"));
    }

    #[test]
    fn states() {
        assert_eq!(stat_state("1 (init) S 0 1"), Some('S'));
        assert_eq!(stat_state("77 (a (b) c) D 1 77"), Some('D'));
        // SAFETY: gettid has no preconditions. (The test runs on a worker thread; the main
        // thread, whose tid is the pid, is asleep waiting for it.)
        let tid = u32::try_from(unsafe { libc::gettid() }).unwrap();
        assert_eq!(thread_state(tid), Some('R'));
        assert!(
            threads_in_d()
                .iter()
                .all(|(tid, _, _)| *tid != std::process::id())
        );
    }

    #[test]
    fn an_address_names_the_file_mapped_there() {
        let maps = "55d0a0000000-55d0a0021000 r--p 00000000 fe:01 131 /usr/bin/python3.11\n\
                    7f00aa000000-7f00ba000000 rw-s 00000000 07:01 12 /mnt/db/my data.mdb\n\
                    7f00ba000000-7f00ba001000 rw-p 00000000 00:00 0 \n\
                    7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n";
        assert_eq!(
            mapped_at(maps, 0x7f00_aa00_1000),
            Some(MappedFile {
                path: "/mnt/db/my data.mdb".into(),
                dev: Dev::new(7, 1),
                ino: 12
            })
        );
        assert_eq!(mapped_at(maps, 0x7f00_ba00_0000), None, "anonymous");
        assert_eq!(mapped_at(maps, 0x7ffd_0000_0010), None, "the stack");
        assert_eq!(mapped_at(maps, 0x10), None, "unmapped");
        assert_eq!(mapped_at("garbage\n1-2 x\n", 1), None);
        // Our own mapping of a file, through /proc.
        let mut cache = ProcCache::default();
        let exe = fs::read_to_string("/proc/self/maps").unwrap();
        let first = exe.lines().next().unwrap();
        let start = u64::from_str_radix(first.split('-').next().unwrap(), 16).unwrap();
        let found = cache.mapped_file(std::process::id(), start, 0).unwrap();
        assert!(found.path.starts_with('/'), "{found:?}");
    }

    #[test]
    fn resolves_our_own_fds() {
        let file = tempfile_in_target();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file.0);
        let mut cache = ProcCache::default();
        let (resolved, _) = cache.resolve_fd(std::process::id(), fd, None, 0);
        assert_eq!(resolved, FileRef::Path(file.1.clone()));
        let (missing, dev) = cache.resolve_fd(std::process::id(), 999_999, None, 0);
        assert!(matches!(missing, FileRef::Unresolved(_)), "{missing:?}");
        assert_eq!(dev, None);
        assert!(!cache.is_kernel_thread(std::process::id()));
        let _ = std::fs::remove_file(&file.1);
    }

    #[test]
    fn an_fd_reused_for_another_file_is_not_named_as_the_synced_one() {
        let file = tempfile_in_target();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file.0);
        let ino = file.0.metadata().unwrap().ino();
        let dev = Dev::from_user(file.0.metadata().unwrap().dev());
        let mut cache = ProcCache::default();
        let (named, _) = cache.resolve_fd(std::process::id(), fd, Some((dev, ino)), 0);
        assert_eq!(named, FileRef::Path(file.1.clone()));
        // The kernel saw another inode behind this fd number during the call: cached or not,
        // this file is not that call's.
        let (reused, at) = cache.resolve_fd(std::process::id(), fd, Some((dev, ino + 1)), 1);
        assert!(
            matches!(reused, FileRef::Unresolved(ref why) if why.contains("reused")),
            "{reused:?}"
        );
        assert_eq!(at, None);
        // The same inode number on another (real) filesystem is another file too.
        assert_ne!(dev.major, 0, "the target directory is on a block device");
        let elsewhere = Dev::new(dev.major + 1, dev.minor);
        let (other_fs, _) = cache.resolve_fd(std::process::id(), fd, Some((elsewhere, ino)), 2);
        assert!(
            matches!(other_fs, FileRef::Unresolved(ref why) if why.contains("reused")),
            "{other_fs:?}"
        );
        // The kernel's anonymous device (a btrfs superblock's; stat reports the subvolume's)
        // is not compared.
        let anonymous = Dev::new(0, 45);
        let (subvolume, _) = cache.resolve_fd(std::process::id(), fd, Some((anonymous, ino)), 3);
        assert_eq!(subvolume, FileRef::Path(file.1.clone()));
        let _ = std::fs::remove_file(&file.1);
    }

    #[test]
    fn a_file_on_an_anonymous_device_is_not_the_block_devices_synced_one() {
        // A container's overlay root: /etc/passwd open on the fd number dpkg had synced an
        // ext4 file on, with the same inode number, stat giving the overlay's device.
        let path = format!("/dev/shm/iotop-bpf-procfs-{}", std::process::id());
        let file = fs::File::create(&path).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let ino = file.metadata().unwrap().ino();
        assert_eq!(Dev::from_user(file.metadata().unwrap().dev()).major, 0);
        let mut cache = ProcCache::default();
        let (named, _) = cache.resolve_fd(std::process::id(), fd, Some((Dev::new(7, 0), ino)), 0);
        let _ = fs::remove_file(&path);
        assert!(
            matches!(named, FileRef::Unresolved(ref why) if why.contains("reused")),
            "{named:?}"
        );
    }

    fn tempfile_in_target() -> (fs::File, String) {
        // One file per test: they run in parallel.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target")
            .canonicalize()
            .unwrap();
        let path = dir.join(format!(
            "iotop-bpf-procfs-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        (
            fs::File::create(&path).unwrap(),
            path.to_string_lossy().into_owned(),
        )
    }
}
