//! Helpers for the privileged end-to-end tests: real probes, real loop-backed filesystems,
//! real workloads. Run them with `cargo xtask test` (as root, one at a time).

use std::{
    io::{BufRead as _, BufReader},
    os::unix::process::{CommandExt as _, ExitStatusExt as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant, SystemTime},
};

use serde_json::Value;

pub mod eval;
pub mod prometheus;
pub mod tmux;

/// True when the test may run. Without root it skips with a visible message, except under CI
/// (`CI=true`), where a privileged test that cannot run is a failure.
#[must_use]
pub fn require_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "{test}: needs root, and CI=true forbids skipping privileged tests"
    );
    eprintln!("SKIPPED {test}: needs root (run `cargo xtask test`, which uses sudo)");
    false
}

/// The binary under test: `IOTOP_BPF_BIN`, else the static one `cargo xtask build` leaves
/// (the one that ships).
#[must_use]
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("IOTOP_BPF_BIN") {
        return PathBuf::from(path);
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/x86_64-unknown-linux-musl/release/iotop-bpf");
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask build` or set IOTOP_BPF_BIN",
        path.display()
    );
    path
}

/// A copy of the binary in a fresh directory anyone may enter and run (the checkout may sit
/// where `nobody` cannot go), for tests that run it unprivileged. Returns (dir, binary).
#[must_use]
pub fn unprivileged_copy(tag: &str) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("iotop-bpf-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("iotop-bpf");
    std::fs::copy(binary(), &exe).unwrap();
    for path in [&dir, &exe] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (dir, exe)
}

/// The capability set docs/kernels.md documents (and the systemd unit grants), as setpriv names
/// them: an unprivileged user holding only these runs the probes fully.
pub const DOCUMENTED_CAPS: &str = "+bpf,+perfmon,+dac_read_search,+sys_ptrace,+syslog";

/// `setpriv` running `exe` as nobody (uid/gid 65534, no groups) holding `caps` (inheritable
/// and ambient, so they survive the exec), with RLIMIT_MEMLOCK unlimited, as the packaged
/// unit sets it (`LimitMEMLOCK=infinity`: kernels before 5.11 charge BPF memory to it).
pub fn as_nobody_with(caps: &str, exe: &std::path::Path) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            &format!("--inh-caps={caps}"),
            &format!("--ambient-caps={caps}"),
        ])
        .arg(exe)
        .env_remove("RUST_BACKTRACE");
    // SAFETY: get/setrlimit are async-signal-safe; they run as root before setpriv drops it.
    // Best effort: a root without CAP_SYS_RESOURCE (some sandboxes) can only raise the soft
    // limit to the hard one, which kernels that charge memcg instead do not need.
    unsafe {
        command.pre_exec(|| {
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) != 0 {
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) == 0 {
                    limit.rlim_cur = limit.rlim_max;
                    libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit);
                }
            }
            Ok(())
        });
    }
    command
}

/// Runs a command and panics with its output when it fails.
pub fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e} (is it installed? `cargo xtask setup`)"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A filesystem on a loop device backed by a file in /dev/shm (so the loop device's own
/// backing I/O causes no further block I/O), its I/O scheduler none. Torn down on drop. The
/// one the demo uses too (`iotop-bpf-loopfs`), named for this test run; its fields
/// (`device`, `dev`, `name`, `mountpoint`) and `path` are the shared one's.
pub struct LoopFs(iotop_bpf_loopfs::LoopFs);

impl LoopFs {
    /// 4 KiB blocks.
    pub fn new(fs: &str, size_mib: u64) -> Self {
        Self::with_block(fs, size_mib, 4096)
    }

    /// A filesystem with `block`-byte blocks.
    pub fn with_block(fs: &str, size_mib: u64, block: u32) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("iotop-bpf-test-{}-{n}-{fs}", std::process::id());
        let loop_fs = iotop_bpf_loopfs::LoopFs::create(&tag, fs, size_mib, Some(block))
            .unwrap_or_else(|e| panic!("{tag}: {e} (is it installed? `cargo xtask setup`)"));
        // A loop device keeps the scheduler its last user set (the btt tests and the
        // recordings' script set mq-deadline): every test starts from none, as it comes.
        let _ = loop_fs.scheduler_none();
        Self(loop_fs)
    }
}

impl std::ops::Deref for LoopFs {
    type Target = iotop_bpf_loopfs::LoopFs;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// `iotop-bpf --json` running in the background; its lines are collected as they come, with
/// the wall-clock time each arrived.
pub struct JsonRun {
    child: Child,
    lines: mpsc::Receiver<(SystemTime, String)>,
    seen: Vec<(SystemTime, Value)>,
}

impl JsonRun {
    /// Starts the tool and waits for its first interval, so the probes are attached.
    pub fn start(extra_args: &[&str]) -> Self {
        Self::start_with_env(extra_args, &[])
    }

    /// Like [`JsonRun::start`], with extra environment variables.
    pub fn start_with_env(extra_args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(binary());
        command.args(extra_args).envs(env.iter().copied());
        Self::start_command(command)
    }

    /// Runs `command` (iotop-bpf, or a wrapper that execs it, such as setpriv) with
    /// `--json -d 0.5` appended, and `--procs 10000` unless it sets `--procs`: the tests
    /// find processes by pid, and a busy machine (CI, another test's leftovers) can put
    /// more than the default 25 in one interval, summing the least busy into `others`.
    pub fn start_command(mut command: Command) -> Self {
        if !command.get_args().any(|a| a == "--procs") {
            command.args(["--procs", "10000"]);
        }
        let mut child = command
            .args(["--json", "-d", "0.5"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start iotop-bpf");
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((SystemTime::now(), line)).is_err() {
                    break;
                }
            }
        });
        let mut run = Self {
            child,
            lines,
            seen: Vec::new(),
        };
        let (arrived, first) = run
            .lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| {
                let status = run.child.try_wait();
                panic!("iotop-bpf printed nothing in 30 s ({e}); exit status {status:?}")
            });
        run.seen.push((arrived, parse(&first)));
        run
    }

    /// Waits, up to `timeout`, until an interval arrives after `t`: whatever ran before `t`
    /// is then in the intervals seen so far, and whatever runs next is not. False when none
    /// arrived in time.
    pub fn wait_past(&mut self, t: SystemTime, timeout: Duration) -> bool {
        if self.seen.last().is_some_and(|(arrived, _)| *arrived > t) {
            return true;
        }
        let deadline = Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let Ok((arrived, line)) = self.lines.recv_timeout(left) else {
                return false;
            };
            self.seen.push((arrived, parse(&line)));
            if arrived > t {
                return true;
            }
        }
        false
    }

    /// The tool's pid.
    #[must_use]
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// Stops the tool with SIGINT (it reports the partial interval) and returns every
    /// interval it printed.
    pub fn stop(self) -> Vec<Value> {
        self.stop_timed()
            .into_iter()
            .map(|(_, interval)| interval)
            .collect()
    }

    /// Like [`JsonRun::stop`], with the wall-clock time each interval's line arrived.
    pub fn stop_timed(mut self) -> Vec<(SystemTime, Value)> {
        // SAFETY: kill with a valid pid and signal.
        unsafe { libc::kill(i32::try_from(self.child.id()).unwrap(), libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "iotop-bpf did not exit after SIGINT"
            );
            thread::sleep(Duration::from_millis(20));
        };
        assert!(
            status.success(),
            "iotop-bpf exited with {status:?} (signal {:?})",
            status.signal()
        );
        while let Ok((arrived, line)) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push((arrived, parse(&line)));
        }
        self.seen
    }
}

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// `u64` field of a JSON object (panics with context when missing).
#[must_use]
pub fn num(value: &Value, field: &str) -> u64 {
    value[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no numeric {field:?} in {value}"))
}

/// A figure of a process's `sync_cost`: `population` is `small`, `large`, `unmeasured` or
/// `directories` (`None`: a field of `sync_cost` itself, such as `empty`). The JSON leaves
/// `sync_cost` out for a process with no sync call settled in the interval: that is 0; a
/// `sync_cost` present without the field still panics.
#[must_use]
pub fn sync_cost(process: &Value, population: Option<&str>, field: &str) -> u64 {
    let cost = &process["sync_cost"];
    if cost.is_null() {
        return 0;
    }
    match population {
        Some(population) => num(&cost[population], field),
        None => num(cost, field),
    }
}

/// Runs `iotop-bpf workload ARGS...` to completion and returns (pid, stdout). The workload
/// prints `pid N: ...` first.
pub fn workload(args: &[&str]) -> (u32, String) {
    workload_in(None, args)
}

/// Like [`workload`], inside a cgroup-v1 blkio group (`/sys/fs/cgroup/blkio/<group>`).
pub fn workload_in(blkio_group: Option<&str>, args: &[&str]) -> (u32, String) {
    let bin = binary();
    let out = match blkio_group {
        None => Command::new(&bin).arg("workload").args(args).output(),
        Some(group) => {
            let script = format!(
                "echo $$ > /sys/fs/cgroup/blkio/{group}/cgroup.procs && exec \"$0\" workload \"$@\""
            );
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .arg(&bin)
                .args(args)
                .output()
        }
    }
    .expect("run the workload");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "workload {args:?} failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = stdout
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.trim_end_matches(':').parse().ok())
        .unwrap_or_else(|| panic!("no pid in the workload's output: {stdout}"));
    (pid, stdout)
}

/// The XFS tail write as built in: 20 O_DIRECT appends of 1 MiB from offset 1536 into new
/// files under `dir` (each zeroes the rest of its last block); returns the workload's pid.
pub fn dio_tail(dir: &std::path::Path) -> u32 {
    workload(&[
        "dio-tail",
        "--dir",
        dir.to_str().unwrap(),
        "--offset",
        "1536",
        "--size",
        "1048576",
        "--count",
        "20",
    ])
    .0
}

/// A cgroup-v1 blkio group that throttles writes to `dev` (`major:minor`) to `iops`;
/// removed on drop.
pub struct BlkioThrottle {
    pub name: String,
}

impl BlkioThrottle {
    pub fn new(dev: &str, write_iops: u32) -> Self {
        let name = format!("iotop-bpf-test-{}", std::process::id());
        let dir = PathBuf::from("/sys/fs/cgroup/blkio").join(&name);
        std::fs::create_dir_all(&dir).expect("create a blkio cgroup (cgroup v1 blkio mounted?)");
        std::fs::write(
            dir.join("blkio.throttle.write_iops_device"),
            format!("{dev} {write_iops}"),
        )
        .expect("set the blkio write throttle");
        Self { name }
    }
}

impl Drop for BlkioThrottle {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(PathBuf::from("/sys/fs/cgroup/blkio").join(&self.name));
    }
}

/// (reads, writes) completed on disk `name` (`loop7`) so far, from /proc/diskstats.
#[must_use]
pub fn diskstats_reads_writes(name: &str) -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap();
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&name))
        .map(|f| (f[3].parse().unwrap(), f[7].parse().unwrap()))
        .unwrap_or_else(|| panic!("{name} not in /proc/diskstats"))
}

/// Every row of disk `name` (`loop7`), one per interval it appeared in.
#[must_use]
pub fn disk_rows<'a>(intervals: &'a [Value], name: &str) -> Vec<&'a Value> {
    intervals
        .iter()
        .flat_map(|i| i["disks"].as_array().into_iter().flatten())
        .filter(|d| d["name"] == name)
        .collect()
}

/// Every process entry of `pid`, one per interval it appeared in.
#[must_use]
pub fn entries_of(intervals: &[Value], pid: u32) -> Vec<&Value> {
    intervals
        .iter()
        .flat_map(|i| i["processes"].as_array().unwrap().iter())
        .filter(|p| p["pid"].as_u64() == Some(u64::from(pid)))
        .collect()
}

/// Every active finding of `kind` for `pid`.
#[must_use]
pub fn findings_of<'a>(intervals: &'a [Value], kind: &str, pid: u32) -> Vec<&'a Value> {
    intervals
        .iter()
        .flat_map(|i| i["findings"].as_array().unwrap().iter())
        .filter(|f| f["kind"] == kind && f["pid"].as_u64() == Some(u64::from(pid)))
        .collect()
}

/// The figures a process had on one device, summed over every interval.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DeviceTotals {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

#[must_use]
pub fn process_on_device(intervals: &[Value], pid: u32, dev: &str) -> DeviceTotals {
    let mut out = DeviceTotals::default();
    for interval in intervals {
        for p in interval["processes"].as_array().unwrap() {
            if p["pid"].as_u64() != Some(u64::from(pid)) {
                continue;
            }
            for d in p["devices"].as_array().unwrap() {
                if d["dev"] == dev {
                    out.reads += num(d, "reads");
                    out.writes += num(d, "writes");
                    out.read_bytes += num(d, "read_bytes");
                    out.write_bytes += num(d, "write_bytes");
                }
            }
        }
    }
    out
}

/// `2026-11-23T04:23:45.233Z` (the reports' `ts`) as a `SystemTime`.
#[must_use]
pub fn parse_rfc3339(ts: &str) -> std::time::SystemTime {
    let num = |range: std::ops::Range<usize>| -> i64 {
        ts.get(range)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an RFC 3339 time: {ts}"))
    };
    let (y, m, d) = (num(0..4), num(5..7), num(8..10));
    // Days from civil (Howard Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + num(11..13) * 3600 + num(14..16) * 60 + num(17..19);
    let ms = num(20..23);
    std::time::UNIX_EPOCH
        + Duration::from_millis(u64::try_from(secs * 1000 + ms).expect("after 1970"))
}
