//! What strace saw a workload do: its syncs, its writes and where they landed, and the
//! zeroing the filesystem's geometry predicts from them.

use super::*;

/// What strace saw the workload do.
#[derive(Default, Debug)]
pub(super) struct Trace {
    /// Sync calls per kind, named as the tool names them.
    pub(super) kinds: BTreeMap<String, u64>,
    /// Bytes written by write, pwrite64, writev, pwritev, pwritev2 (their results), any fd.
    pub(super) write_bytes: u64,
    /// The same per thread (strace prints thread ids; [`Trace::write_bytes_by_process`]
    /// sums them by process), only used to name writers the tool does not list.
    pub(super) write_bytes_by: BTreeMap<u32, u64>,
    /// The thread each thread was created by (`clone` with `CLONE_THREAD`): etcd's and
    /// PostgreSQL's writers are threads of a listed process.
    pub(super) created_by: HashMap<u32, u32>,
    /// Of those, to files on the workload's filesystem.
    pub(super) fs_write_bytes: u64,
    /// Direct writes to files on the filesystem, in order: (path, offset, bytes).
    pub(super) direct_writes: Vec<(String, u64, u64)>,
    /// Every process (thread) id in the log.
    pub(super) pids: BTreeSet<u32>,
    /// The size each file written on the filesystem reached, by path (a file renamed
    /// keeps its first name; one rewritten under its name counts its last size).
    pub(super) fs_file_sizes: BTreeMap<String, u64>,
}

/// What an open said about a path.
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct OpenFile {
    dsync: bool,
    osync: bool,
    direct: bool,
    append: bool,
    /// The position of the last open's writes (one writer per file in the corpus).
    pos: u64,
    size: u64,
}

impl Trace {
    /// [`Trace::write_bytes_by`] summed by process: each thread under the process that
    /// created its first ancestor (a clone line can come after the new thread's own calls,
    /// so this is resolved once the log is read).
    pub(super) fn write_bytes_by_process(&self) -> BTreeMap<u32, u64> {
        let mut by = BTreeMap::new();
        for (&tid, &bytes) in &self.write_bytes_by {
            let mut tgid = tid;
            // Bounded: a cycle cannot come from a real log, but the walk must end anyway.
            for _ in 0..64 {
                match self.created_by.get(&tgid) {
                    Some(&parent) => tgid = parent,
                    None => break,
                }
            }
            *by.entry(tgid).or_default() += bytes;
        }
        by
    }

    /// Parses `strace -f -y -s 0` output (`PID call(args) = result`, with
    /// `<unfinished ...>` / `<... call resumed>` pairs).
    pub(super) fn parse(text: &str, mountpoint: &Path) -> Self {
        let mut t = Self::default();
        let mount = format!("{}/", mountpoint.display());
        let mut pending: HashMap<&str, String> = HashMap::new();
        let mut files: HashMap<String, OpenFile> = HashMap::new();
        for line in text.lines() {
            let Some((pid, rest)) = line.split_once(' ') else {
                continue;
            };
            let rest = rest.trim_start();
            if let Ok(pid) = pid.parse() {
                t.pids.insert(pid);
            }
            let full = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
                pending.insert(pid, head.to_string());
                continue;
            } else if rest.starts_with("<... ") {
                let Some(head) = pending.remove(pid) else {
                    continue;
                };
                let Some(i) = rest.find("resumed>") else {
                    continue;
                };
                format!("{head}{}", &rest[i + "resumed>".len()..])
            } else {
                rest.to_string()
            };
            t.call(pid.parse().unwrap_or(0), &full, &mount, &mut files);
        }
        t
    }

    pub(super) fn call(
        &mut self,
        pid: u32,
        call: &str,
        mount: &str,
        files: &mut HashMap<String, OpenFile>,
    ) {
        let Some(open_paren) = call.find('(') else {
            return;
        };
        let name = &call[..open_paren];
        // `call(args) = result`; strace pads resumed calls: `call(args)      = result`.
        let Some(eq) = call.rfind(" = ") else {
            return;
        };
        let Some(close) = call[..eq].rfind(')') else {
            return;
        };
        if close < open_paren || !call[close + 1..eq].trim().is_empty() {
            return;
        }
        let args = &call[open_paren + 1..close];
        let result = call[eq + 3..].trim_start();
        let ret: i64 = result
            .split([' ', '<'])
            .next()
            .and_then(|r| r.parse().ok())
            .unwrap_or(-1);
        if ret < 0 {
            return;
        }
        let ret = ret.unsigned_abs();
        let bump = |t: &mut Self, kind: &str| *t.kinds.entry(kind.to_string()).or_default() += 1;
        match name {
            // Only starting write-back (no wait flag) is not a wait for durability: the tool
            // names it apart (and leaves it out of `syncs`).
            "sync_file_range" if args.ends_with(", SYNC_FILE_RANGE_WRITE") => {
                bump(self, SRF_WRITE);
            }
            "fsync" | "fdatasync" | "sync_file_range" | "syncfs" | "sync" => bump(self, name),
            "clone" | "clone3" if args.contains("CLONE_THREAD") => {
                if let Ok(tid) = u32::try_from(ret) {
                    self.created_by.insert(tid, pid);
                }
            }
            "msync" if args.contains("MS_SYNC") => bump(self, "msync"),
            "open" | "openat" | "creat" => opened(files, name, args, result),
            "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" => {
                // Only what can reach a disk, as the tool counts: a file, not a pipe or a
                // socket (no path), a terminal or /dev/null (rsync's sender writes every
                // byte it copies into a socket to the receiver).
                let Some(path) = fd_path(args) else {
                    return;
                };
                if ["/dev/", "/proc/", "/sys/"]
                    .iter()
                    .any(|p| path.starts_with(p) && !path.starts_with("/dev/shm/"))
                {
                    return;
                }
                self.write_bytes += ret;
                *self.write_bytes_by.entry(pid).or_default() += ret;
                if !path.starts_with(mount) {
                    return;
                }
                self.fs_write_bytes += ret;
                let file = files.entry(path.clone()).or_default();
                let positional = name != "write" && name != "writev";
                let offset = if positional {
                    // The offset is the last argument (pwritev2: the one before the flags).
                    let parts: Vec<&str> = args.rsplit(", ").collect();
                    let at = if name == "pwritev2" { 1 } else { 0 };
                    parts.get(at).and_then(|o| o.parse().ok()).unwrap_or(0)
                } else if file.append {
                    file.size
                } else {
                    file.pos
                };
                if !positional {
                    file.pos = offset + ret;
                }
                file.size = file.size.max(offset + ret);
                self.fs_file_sizes.insert(path.clone(), file.size);
                let (dsync, osync, direct) = opened_flags(files, args, &path);
                let flags_dsync = name == "pwritev2" && args.contains("RWF_DSYNC");
                let flags_sync = name == "pwritev2" && args.contains("RWF_SYNC");
                if direct && ret > 0 {
                    self.direct_writes.push((path.clone(), offset, ret));
                }
                if ret > 0 {
                    if osync || flags_sync {
                        bump(self, "O_SYNC write");
                    } else if dsync || flags_dsync {
                        bump(self, "O_DSYNC write");
                    }
                }
            }
            _ => {}
        }
    }

    /// Calls per kind as the tool's JSON names them: before `sync_file_range(WRITE)` was a
    /// kind of its own (`tool_splits`), every sync_file_range was a `sync_file_range`.
    pub(super) fn kinds_for(&self, tool_splits: bool) -> BTreeMap<String, u64> {
        let mut kinds = self.kinds.clone();
        if !tool_splits && let Some(n) = kinds.remove(SRF_WRITE) {
            *kinds.entry("sync_file_range".to_string()).or_default() += n;
        }
        kinds
    }

    /// Data the files written on the filesystem hold, each rounded up to whole blocks.
    pub(super) fn fs_data_blocks_bytes(&self, block: u64) -> u64 {
        self.fs_file_sizes
            .values()
            .map(|size| size.div_ceil(block) * block)
            .sum()
    }

    /// Calls that commit the journal: fsync and fdatasync (directories' included).
    pub(super) fn committing_syncs(&self) -> u64 {
        ["fsync", "fdatasync", "O_DSYNC write", "O_SYNC write"]
            .iter()
            .filter_map(|k| self.kinds.get(*k))
            .sum()
    }

    pub(super) fn direct_files(&self) -> BTreeSet<&str> {
        self.direct_writes
            .iter()
            .map(|(p, _, _)| p.as_str())
            .collect()
    }

    /// What the filesystem zeroes for the direct writes, predicted from its block size:
    /// (writes that zero a block's tail after their end, bytes zeroed before and after).
    /// Every block starts unwritten (new files, or fio's fallocated layout: `filefrag -v`
    /// confirms the extents left unwritten); a block becomes written once a write covers
    /// any of it (the filesystem zeroes the rest of it in the same call).
    pub(super) fn predicted_zeroing(&self, block: u64) -> (u64, u64) {
        let mut written: HashMap<&str, BTreeSet<u64>> = HashMap::new();
        let (mut tail_writes, mut zeroed) = (0, 0);
        for (path, offset, len) in &self.direct_writes {
            let done = written.entry(path.as_str()).or_default();
            let (start, end) = (*offset, offset + len);
            let (first, last) = (start / block, (end - 1) / block);
            if start % block != 0 && !done.contains(&first) {
                zeroed += start % block;
            }
            if end % block != 0 && !done.contains(&last) {
                tail_writes += 1;
                zeroed += block - end % block;
            }
            done.extend(first..=last);
        }
        (tail_writes, zeroed)
    }
}

/// `sync_file_range(fd, off, len, SYNC_FILE_RANGE_WRITE)`: starts write-back, waits for
/// nothing (git's writeout-only, dpkg's first pass).
pub(super) const SRF_WRITE: &str = "sync_file_range(WRITE)";

/// The path strace -y printed after an fd: `3</tmp/x/f>` -> `/tmp/x/f`.
/// An open: the file's flags, under its path and its fd (see `opened_flags`).
fn opened(files: &mut HashMap<String, OpenFile>, name: &str, args: &str, result: &str) {
    let Some(path) = fd_path(result) else {
        return;
    };
    let old = files.get(&path).copied().unwrap_or_default();
    let append = args.contains("O_APPEND");
    let file = OpenFile {
        dsync: args.contains("O_DSYNC"),
        osync: args.contains("O_SYNC"),
        direct: args.contains("O_DIRECT"),
        append,
        pos: if append { old.size } else { 0 },
        size: if args.contains("O_TRUNC") || name == "creat" {
            0
        } else {
            old.size
        },
    };
    if let Some(fd) = fd_number(result) {
        files.insert(format!("{fd}\u{0}{path}"), file);
    }
    files.insert(path, file);
}

/// A write's `O_DSYNC`, `O_SYNC` and `O_DIRECT`: its fd's, from the open that returned it
/// (LMDB opens data.mdb twice, once O_DSYNC for its meta page, and writes its data pages
/// through the other fd), else the path's last open's.
fn opened_flags(files: &HashMap<String, OpenFile>, args: &str, path: &str) -> (bool, bool, bool) {
    let f = fd_number(args)
        .and_then(|fd| files.get(&format!("{fd}\u{0}{path}")))
        .or_else(|| files.get(path))
        .copied()
        .unwrap_or_default();
    (f.dsync, f.osync, f.direct)
}

/// The fd number in front of its `<path>` (`6</m/data.mdb>`).
fn fd_number(text: &str) -> Option<u32> {
    text.split('<').next()?.trim().parse().ok()
}

pub(super) fn fd_path(text: &str) -> Option<String> {
    let start = text.find('<')? + 1;
    let end = start + text[start..].find('>')?;
    let path = &text[start..end];
    path.starts_with('/').then(|| path.to_string())
}

/// `layout.dat: 3 extents, 1 unwritten (12.0 MiB of 64.0 MiB written)` per file.
pub(super) fn filefrag_summary(paths: BTreeSet<&str>) -> String {
    let mut parts = Vec::new();
    for path in paths {
        let Ok(out) = Command::new("filefrag").args(["-v", path]).output() else {
            continue;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let (mut extents, mut unwritten, mut blocks, mut unwritten_blocks) =
            (0u64, 0u64, 0u64, 0u64);
        for line in text.lines() {
            // `   0:        0..    4095:      24..   4119:   4096:             unwritten`
            let fields: Vec<&str> = line.split(':').map(str::trim).collect();
            if fields.len() < 4 || fields[0].parse::<u64>().is_err() {
                continue;
            }
            let length: u64 = fields[3].parse().unwrap_or(0);
            extents += 1;
            blocks += length;
            if line.contains("unwritten") {
                unwritten += 1;
                unwritten_blocks += length;
            }
        }
        let name = Path::new(path)
            .file_name()
            .map_or(path.into(), |n| n.to_string_lossy());
        parts.push(format!(
            "filefrag {name}: {extents} extents, {unwritten} unwritten ({unwritten_blocks} of {blocks} blocks)"
        ));
    }
    if parts.len() > 3 {
        let n = parts.len();
        parts.truncate(2);
        parts.push(format!("{} more files", n - 2));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"100 openat(AT_FDCWD</m>, "/m/d.out", O_WRONLY|O_CREAT|O_TRUNC|O_DSYNC, 0666) = 3</m/d.out>
100 write(3</m/d.out>, ""..., 128) = 128
100 write(1<pipe:[7]>, ""..., 10) = 10
100 write(2</dev/pts/0>, ""..., 12) = 12
101 fsync(7</m/a.aof> <unfinished ...>
100 write(3</m/d.out>, ""..., 128 <unfinished ...>
101 <... fsync resumed>)              = 0
100 <... write resumed>)                = 128
101 fdatasync(4</m/x>) = -1 EIO (Input/output error)
101 sync_file_range(5</m/o>, 0, 0, SYNC_FILE_RANGE_WRITE) = 0
101 msync(0x7f, 4096, MS_ASYNC) = 0
101 msync(0x7f, 4096, MS_SYNC) = 0
101 pwrite64(6</elsewhere/f>, ""..., 100, 4096) = 100
102 openat(AT_FDCWD</m>, "/m/dio", O_WRONLY|O_CREAT|O_DIRECT, 0644) = 3</m/dio>
102 pwrite64(3</m/dio>, ""..., 6144, 0) = 6144
102 pwrite64(3</m/dio>, ""..., 6144, 6144) = 6144
102 pwritev2(3</m/dio>, [{iov_base=""..., iov_len=512}], 1, 12288, RWF_DSYNC) = 512
"#;

    #[test]
    fn strace_log_gives_sync_kinds_and_bytes() {
        let t = Trace::parse(LOG, Path::new("/m"));
        let kinds: Vec<(&str, u64)> = t.kinds.iter().map(|(k, &n)| (k.as_str(), n)).collect();
        assert_eq!(
            kinds,
            [
                ("O_DSYNC write", 3),
                ("fsync", 1),
                ("msync", 1),
                ("sync_file_range(WRITE)", 1)
            ]
        );
        assert_eq!(t.kinds_for(false).get("sync_file_range"), Some(&1));
        assert_eq!(t.kinds_for(false).get(SRF_WRITE), None);
        // Not the 10 bytes into a pipe: they cannot reach a disk.
        assert_eq!(t.write_bytes, 128 * 2 + 100 + 6144 * 2 + 512);
        assert_eq!(t.fs_write_bytes, 128 * 2 + 6144 * 2 + 512);
        assert_eq!(
            t.direct_writes,
            [
                ("/m/dio".to_string(), 0, 6144),
                ("/m/dio".to_string(), 6144, 6144),
                ("/m/dio".to_string(), 12288, 512)
            ]
        );
    }

    #[test]
    fn a_threads_writes_are_its_process() {
        // The new thread's calls can come before its creator's clone returns in the log.
        let log = r#"200 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM, exit_signal=0, stack=0x7f, stack_size=0x7ff}, 88 <unfinished ...>
201 write(3</m/wal>, ""..., 100) = 100
200 <... clone3 resumed>) = 201
201 clone(child_stack=0xc0, flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_SYSVSEM|CLONE_THREAD) = 202
202 pwrite64(4</m/db>, ""..., 4096, 0) = 4096
200 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 300
300 write(3</m/log>, ""..., 10) = 10
"#;
        let t = Trace::parse(log, Path::new("/m"));
        assert_eq!(
            t.write_bytes_by_process().into_iter().collect::<Vec<_>>(),
            [(200, 4196), (300, 10)]
        );
    }

    #[test]
    fn zeroing_follows_the_block_size() {
        let t = Trace::parse(LOG, Path::new("/m"));
        // 4 KiB blocks: [0, 6k) zeroes 2 KiB after its end; [6k, 12k) starts in a block the
        // first one wrote and ends on a boundary; [12k, 12.5k) zeroes 3.5 KiB.
        assert_eq!(t.predicted_zeroing(4096), (2, 2048 + 3584));
        // 1 KiB blocks: only the 512-byte write is partial.
        assert_eq!(t.predicted_zeroing(1024), (1, 512));
        // Appends of 3584 bytes from 0 on 4 KiB blocks: every call but each eighth ends
        // inside a fresh block.
        let log: String = (0..16)
            .map(|i| format!("1 pwrite64(3</m/a>, \"\"..., 3584, {}) = 3584\n", i * 3584))
            .collect();
        let log = format!("1 openat(AT_FDCWD</m>, \"/m/a\", O_WRONLY|O_DIRECT) = 3</m/a>\n{log}");
        let t = Trace::parse(&log, Path::new("/m"));
        assert_eq!(t.predicted_zeroing(4096).0, 14);
    }

    #[test]
    fn magnitudes_within_twice() {
        let m = |tool, oracle| Magnitude {
            what: String::new(),
            unit: Unit::Count,
            tool,
            oracle,
            source: "",
            judged: true,
            note: String::new(),
        };
        assert!(m(0.0, 0.0).within());
        assert!(m(100.0, 200.0).within());
        assert!(!m(100.0, 201.0).within());
        assert!(!m(0.0, 1.0).within());
        assert!(!m(3.0, 1.0).within());
    }
}
