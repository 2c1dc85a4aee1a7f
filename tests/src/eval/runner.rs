//! One workload on one filesystem: a fresh filesystem, iotop-bpf, the program (under
//! strace where it is checked), then the figures and findings against the oracles.

use super::scoring::{evidence_of, magnitudes, raised_for, score};
use super::*;

/// Longer than any workload takes (the longest run ~5 s).
pub(super) const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// The system calls strace follows: the sync calls, the writes, and the opens (for the flags
/// and the path of each fd).
pub(super) const STRACED: &str = "fsync,fdatasync,sync_file_range,syncfs,sync,msync,write,pwrite64,writev,\
                       pwritev,pwritev2,open,openat,creat,clone,clone3";

/// Whether a workload runs under strace: any check but the read amplification's (faults are
/// no system calls).
fn needs_strace(w: &Workload) -> bool {
    w.checks
        .iter()
        .any(|c| !matches!(c, Check::ReadAmplification { .. }))
}

pub(super) fn run_one(w: &Workload, fs_kind: Fs) -> Cell {
    static RUN: AtomicU32 = AtomicU32::new(0);
    let started = Instant::now();
    let fs = LoopFs::with_block(fs_kind.kind, 1024, fs_kind.block);
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).expect("create the eval cache directory");
    let env = |command: &mut Command| {
        command
            .env("D", &fs.mountpoint)
            .env("CORPUS", corpus_dir())
            .env("CACHE", &cache);
    };
    if !w.setup.is_empty() {
        run_setup(w, fs_kind, &env);
    }
    crate::sh("sync", &["-f", fs.mountpoint.to_str().unwrap()]);

    let traced = needs_strace(w);
    let log = std::env::temp_dir().join(format!(
        "iotop-bpf-eval-strace-{}-{}.txt",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    let before = diskstats(&fs.name);
    let run = JsonRun::start(&[]);
    let workload_started = Instant::now();
    let workload_started_at = std::time::SystemTime::now();
    let mut command = workload_command(w, traced, &log);
    env(&mut command);
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start workload {}: {e}", w.name));
    let top = child.id();
    // pid -> its start time (field 22 of /proc/PID/stat), to end only our own leftovers.
    let pids = Arc::new(Mutex::new(BTreeMap::from([(top, start_time(top))])));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = watch(Arc::clone(&pids), Arc::clone(&done), workload_started);
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for workload {}: {e}", w.name));
    let workload_seconds = workload_started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    let pids = pids.lock().map(|p| p.clone()).unwrap_or_default();
    end_leftovers(&pids);
    if !output.status.success() {
        let _ = run.stop();
        let _ = std::fs::remove_file(&log);
        panic!(
            "workload {} on {fs_kind} failed: {}\n{}",
            w.name,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Let the last sync calls settle and an INFO finding persist past its streak.
    thread::sleep(Duration::from_millis(1_500));
    let timed = run.stop_timed();
    let intervals: Vec<Value> = timed.iter().map(|(_, i)| i.clone()).collect();
    let after = diskstats(&fs.name);
    let trace = if traced {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        Some(Trace::parse(&text, &fs.mountpoint))
    } else {
        None
    };
    // Polling /proc misses a process that lives less than its period (a sqlite3 that
    // creates a table); under strace, every process of the tree is in the log.
    let mut pid_set: BTreeSet<u32> = pids.keys().copied().collect();
    if let Some(trace) = &trace {
        pid_set.extend(trace.pids.iter().copied());
    }
    let raised = raised_for(&intervals, &pid_set, &fs.dev);
    // When the screen first showed an expected finding, from the program's start.
    let expected: Vec<&str> = w.expect.iter().flat_map(|g| g.iter().copied()).collect();
    let first_named_s = first_named(&timed, &expected, &pid_set, &fs.dev, workload_started_at);
    if let Some(keep) = std::env::var_os("IOTOP_BPF_EVAL_KEEP") {
        keep_run(
            Path::new(&keep),
            w.name,
            fs_kind,
            &intervals,
            &pid_set,
            traced.then_some(&log),
        );
    }
    let _ = std::fs::remove_file(&log);
    let filefrag = direct_extents(w, trace.as_ref());
    // The strace process itself is no part of the workload's figures (it is not traced).
    let tree: BTreeSet<u32> = if traced {
        pid_set.iter().copied().filter(|&p| p != top).collect()
    } else {
        pid_set.clone()
    };
    let magnitudes = magnitudes(
        w,
        fs_kind,
        &Figures::of(&intervals, &tree, &fs.name),
        &before,
        &after,
        trace.as_ref(),
        filefrag,
    );
    let fs_dev = fs.dev.clone();
    drop(fs);
    let mut cell = score(
        w,
        fs_kind,
        raised,
        magnitudes,
        started.elapsed().as_secs_f64(),
        workload_seconds,
    );
    cell.first_named_s = first_named_s;
    keep_if_wrong(&mut cell, &intervals, &pid_set, &fs_dev, &cache);
    cell
}

/// A cell whose findings are wrong gets their evidence, and its intervals are kept under
/// `target/eval/wrong/` for a closer look where the CI machine's workspace survives the run.
fn keep_if_wrong(
    cell: &mut Cell,
    intervals: &[Value],
    pid_set: &BTreeSet<u32>,
    fs_dev: &str,
    cache: &Path,
) {
    let at_fault: Vec<String> = cell
        .false_positives
        .iter()
        .chain(cell.unnamed.iter())
        .cloned()
        .collect();
    if at_fault.is_empty() {
        return;
    }
    cell.evidence = evidence_of(intervals, pid_set, fs_dev, &at_fault);
    keep_run(
        &cache.join("../wrong"),
        cell.workload,
        cell.fs,
        intervals,
        pid_set,
        None,
    );
}

/// filefrag's summary of the files the workload wrote with direct I/O, where zeroing is
/// checked (empty else).
fn direct_extents(w: &Workload, trace: Option<&Trace>) -> String {
    if w.checks.contains(&Check::Zeroing) {
        trace
            .map(|t| filefrag_summary(t.direct_files()))
            .unwrap_or_default()
    } else {
        String::new()
    }
}

/// The workload's setup, run before iotop-bpf starts: it must succeed.
fn run_setup(w: &Workload, fs_kind: Fs, env: &impl Fn(&mut Command)) {
    let mut setup = Command::new("sh");
    setup.arg("-c").arg(w.setup);
    env(&mut setup);
    let out = setup
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("start the setup of {}: {e}", w.name));
    assert!(
        out.status.success(),
        "setup of {} on {fs_kind} failed: {}\n{}{}",
        w.name,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The workload's command: under strace (its system calls logged to `log`) when checked.
fn workload_command(w: &Workload, traced: bool, log: &Path) -> Command {
    if traced {
        let mut c = Command::new("strace");
        c.args([
            "-f",
            "-qq",
            "--seccomp-bpf",
            "-y",
            "-s",
            "0",
            "-e",
            "signal=none",
        ])
        .args(["-e", &format!("trace={STRACED}")])
        .arg("-o")
        .arg(log)
        .args(["sh", "-c", w.command]);
        c
    } else {
        let mut c = Command::new("sh");
        c.arg("-c").arg(w.command);
        c
    }
}

/// Collects the workload's process tree in `pids` until `done`; a workload running past
/// [`WORKLOAD_TIMEOUT`] has its processes ended.
fn watch(
    pids: Arc<Mutex<BTreeMap<u32, u64>>>,
    done: Arc<AtomicBool>,
    workload_started: Instant,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            collect_descendants(&pids);
            // A workload that hangs (a server that never stops) fails instead of
            // holding the whole run.
            if workload_started.elapsed() > WORKLOAD_TIMEOUT {
                if let Ok(pids) = pids.lock() {
                    end_leftovers(&pids);
                }
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
    })
}

/// Seconds from the program's start to the first interval that raised an `expected` finding.
fn first_named(
    timed: &[(std::time::SystemTime, Value)],
    expected: &[&str],
    pid_set: &BTreeSet<u32>,
    dev: &str,
    workload_started_at: std::time::SystemTime,
) -> Option<f64> {
    timed
        .iter()
        .find(|(_, interval)| {
            raised_for(std::slice::from_ref(interval), pid_set, dev)
                .iter()
                .any(|(kind, _)| expected.contains(&kind.as_str()))
        })
        .and_then(|(arrived, _)| arrived.duration_since(workload_started_at).ok())
        .map(|d| d.as_secs_f64())
}

/// `IOTOP_BPF_EVAL_KEEP=DIR` keeps each run's JSON intervals, its process tree and its strace
/// log there, for a closer look (`NAME-FS.jsonl`, `NAME-FS.pids`, `NAME-FS.strace`).
pub(super) fn keep_run(
    dir: &Path,
    name: &str,
    fs: Fs,
    intervals: &[Value],
    pids: &BTreeSet<u32>,
    log: Option<&PathBuf>,
) {
    let _ = std::fs::create_dir_all(dir);
    let stem = format!("{name}-{}{}k", fs.kind, fs.block / 1024);
    let lines: String = intervals.iter().map(|i| format!("{i}\n")).collect();
    private_write(&dir.join(format!("{stem}.jsonl")), lines.as_bytes());
    let pids: String = pids.iter().map(|p| format!("{p}\n")).collect();
    private_write(&dir.join(format!("{stem}.pids")), pids.as_bytes());
    if let Some(log) = log {
        private_write(
            &dir.join(format!("{stem}.strace")),
            &std::fs::read(log).unwrap_or_default(),
        );
    }
}

/// Written 0600: the intervals and the trace name other processes and their files.
fn private_write(path: &Path, bytes: &[u8]) {
    use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _};
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(bytes));
}

/// Adds every process whose parent is already in `pids`.
pub(super) fn collect_descendants(pids: &Mutex<BTreeMap<u32, u64>>) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let Ok(mut pids) = pids.lock() else { return };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pids.contains_key(&pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rfind(')')
            .map(|i| stat[i + 1..].split_whitespace().collect())
            .unwrap_or_default();
        // After the command: state (0), ppid (1), ..., starttime (19).
        let ppid = fields.get(1).and_then(|p| p.parse::<u32>().ok());
        if ppid.is_some_and(|ppid| pids.contains_key(&ppid)) {
            let start = fields.get(19).and_then(|s| s.parse().ok()).unwrap_or(0);
            pids.insert(pid, start);
        }
    }
}

/// A process's start time in clock ticks after boot (0 when gone).
pub(super) fn start_time(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let i = stat.rfind(')')?;
            stat[i + 1..].split_whitespace().nth(19)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Ends the workload's processes still alive (a server a failed script left behind would
/// keep its filesystem busy), each only if it is still the process we saw start.
pub(super) fn end_leftovers(pids: &BTreeMap<u32, u64>) {
    for (&pid, &start) in pids {
        if start != 0 && start_time(pid) == start {
            // SAFETY: kill with a pid we started (checked by its start time) and a signal.
            unsafe { libc::kill(i32::try_from(pid).unwrap_or(i32::MAX), libc::SIGKILL) };
        }
    }
}

/// /proc/diskstats of one device: (sectors written, writes completed).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct DiskStat {
    pub(super) write_bytes: u64,
    pub(super) writes: u64,
    pub(super) read_bytes: u64,
}

pub(super) fn diskstats(name: &str) -> DiskStat {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&name))
        .map(|f| {
            let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            DiskStat {
                writes: n(7),
                write_bytes: n(9) * 512,
                read_bytes: n(5) * 512,
            }
        })
        .unwrap_or_default()
}

/// The tool's figures for the workload, from its JSON intervals.
#[derive(Default, Debug)]
pub(super) struct Figures {
    pub(super) disk_write_bytes: u64,
    pub(super) disk_read_bytes: u64,
    /// `amplification` of each `read_amplification` finding of the workload's processes.
    pub(super) read_amplification: Vec<f64>,
    pub(super) disk_writes: u64,
    pub(super) syncs: u64,
    pub(super) kinds: BTreeMap<String, u64>,
    pub(super) logical_write_bytes: u64,
    /// `amplification` of each `write_amplification` finding of the workload's processes.
    pub(super) amplification: Vec<f64>,
    /// Small sync calls settled (`sync_cost.small`) and their device bytes (own + charged).
    pub(super) small_syncs: u64,
    pub(super) small_sync_device_bytes: u64,
    pub(super) zeroing_writes: u64,
    pub(super) zeroed_bytes: u64,
    /// The same from the `sub_block_tail_write` findings' evidence, summed over intervals.
    pub(super) finding_zeroing: Option<(u64, u64)>,
    /// Every process of the tree that has a row in some interval: its command, its
    /// `totals.logical_write_bytes` and the interval of its first row.
    pub(super) listed: BTreeMap<u32, (String, u64, usize)>,
}

impl Figures {
    fn of(intervals: &[Value], pids: &BTreeSet<u32>, disk: &str) -> Self {
        let mut f = Self::default();
        let n = |v: &Value, field: &str| v[field].as_u64().unwrap_or(0);
        for (index, interval) in intervals.iter().enumerate() {
            for d in interval["disks"].as_array().into_iter().flatten() {
                if d["name"] == disk {
                    f.disk_write_bytes += n(d, "write_bytes");
                    f.disk_read_bytes += n(d, "read_bytes");
                    f.disk_writes += n(d, "writes");
                }
            }
            for p in interval["processes"].as_array().into_iter().flatten() {
                let Some(pid) = p["pid"].as_u64().and_then(|p| u32::try_from(p).ok()) else {
                    continue;
                };
                if !pids.contains(&pid) {
                    continue;
                }
                let total = n(&p["totals"], "logical_write_bytes");
                let comm = p["comm"].as_str().unwrap_or("?").to_string();
                let row = f.listed.entry(pid).or_insert((comm, 0, index));
                row.1 = row.1.max(total);
                f.syncs += n(p, "syncs");
                for (kind, count) in p["sync_kinds"].as_object().into_iter().flatten() {
                    *f.kinds.entry(kind.clone()).or_default() += count.as_u64().unwrap_or(0);
                }
                let small = &p["sync_cost"]["small"];
                f.small_syncs += n(small, "calls");
                f.small_sync_device_bytes += n(small, "own_bytes") + n(small, "charged_bytes");
                let dio = &p["direct_io"];
                f.zeroing_writes += n(dio, "zeroing_writes");
                f.zeroed_bytes += n(dio, "zeroed_tail_bytes")
                    + n(dio, "zeroed_head_bytes")
                    + n(dio, "zeroed_inside_bytes");
            }
            for finding in interval["findings"].as_array().into_iter().flatten() {
                let mine = finding["pid"]
                    .as_u64()
                    .and_then(|p| u32::try_from(p).ok())
                    .is_some_and(|p| pids.contains(&p));
                if mine
                    && finding["kind"] == "write_amplification"
                    && let Some(x) = finding["evidence"]["amplification"].as_f64()
                {
                    f.amplification.push(x);
                }
                if mine
                    && finding["kind"] == "read_amplification"
                    && let Some(x) = finding["evidence"]["amplification"].as_f64()
                {
                    f.read_amplification.push(x);
                }
                if mine && finding["kind"] == "sub_block_tail_write" {
                    let e = &finding["evidence"];
                    let z = f.finding_zeroing.get_or_insert((0, 0));
                    z.0 += n(e, "zeroing_writes");
                    z.1 += n(e, "zeroed_bytes");
                }
            }
        }
        f.logical_write_bytes = f.listed.values().map(|(_, total, _)| total).sum();
        f
    }
}
