//! The processes the bench measures: tracers in the background, their CPU, memory and BPF
//! run time, read from /proc.

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    io::{BufRead, BufReader, Read},
    process::{Child, Command, Stdio},
    sync::mpsc::{self, Receiver, RecvTimeoutError},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::util::{cmd, describe, run};

/// A `kB` field of /proc/PID/status.
pub(super) fn status_field(pid: u32, key: &str) -> Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {key} in /proc/{pid}/status"))
}

/// The number under `"key"` after `"events"` in one JSON line (the workspace's serde_json
/// is not worth a lock-file change for two counters).
pub(super) fn events_field(line: &str, key: &str) -> Option<u64> {
    let events = &line[line.find("\"events\"")?..];
    let pattern = format!("\"{key}\"");
    let rest = events[events.find(&pattern)? + pattern.len()..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..digits].parse().ok()
}

/// utime + stime of a process, in clock ticks.
pub(super) fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the parenthesised comm (which may hold spaces) start at field 3.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    match (field(14), field(15)) {
        (Some(utime), Some(stime)) => Ok(utime + stime),
        _ => bail!("unexpected /proc/{pid}/stat: {stat}"),
    }
}

/// One BPF program's statistics: its run time and runs so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ProgRun {
    /// Its tag (`prog_tag`), which names it in /proc/kallsyms.
    pub tag: String,
    pub ns: u64,
    pub runs: u64,
    /// `enum bpf_prog_type`: 17 raw tracepoint, 26 tracing (`tp_btf`, fentry), 5 classic
    /// tracepoint.
    pub prog_type: u32,
}

/// The BPF programs a process holds open, by program id, from /proc/PID/fdinfo (works
/// without bpftool, and counts exactly that process's programs). None if it holds none.
pub(super) fn prog_stats(pid: u32) -> Option<BTreeMap<u32, ProgRun>> {
    let mut programs = BTreeMap::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        // A descriptor may close while we look: skip it.
        if !fs::read_link(entry.path())
            .is_ok_and(|target| target.as_os_str() == "anon_inode:bpf-prog")
        {
            continue;
        }
        let Ok(info) = fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            entry.file_name().to_string_lossy()
        )) else {
            continue;
        };
        let value = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::trim)
                .unwrap_or_default()
        };
        // Two fds of one program count once: keyed by its id.
        let Ok(id) = value("prog_id:").parse() else {
            continue;
        };
        programs.insert(
            id,
            ProgRun {
                tag: value("prog_tag:").to_owned(),
                ns: value("run_time_ns:").parse().unwrap_or(0),
                runs: value("run_cnt:").parse().unwrap_or(0),
                prog_type: value("prog_type:").parse().unwrap_or(0),
            },
        );
    }
    (!programs.is_empty()).then_some(programs)
}

/// What each program ran between two snapshots, named (programs loaded in between count
/// from zero).
pub(super) fn prog_deltas(
    before: &BTreeMap<u32, ProgRun>,
    after: &BTreeMap<u32, ProgRun>,
) -> Vec<(String, ProgRun)> {
    let names = prog_names();
    after
        .iter()
        .map(|(id, now)| {
            let then = before.get(id).cloned().unwrap_or_default();
            let name = names
                .get(&now.tag)
                .cloned()
                .unwrap_or_else(|| format!("prog {id}"));
            (
                name,
                ProgRun {
                    tag: now.tag.clone(),
                    ns: now.ns.saturating_sub(then.ns),
                    runs: now.runs.saturating_sub(then.runs),
                    prog_type: now.prog_type,
                },
            )
        })
        .collect()
}

/// Program names by tag, from /proc/kallsyms (`bpf_prog_<tag>_<name>`: the name as loaded,
/// cut to 15 characters).
fn prog_names() -> HashMap<String, String> {
    let symbols = fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    symbols
        .lines()
        .filter_map(|line| {
            let symbol = line.split_whitespace().nth(2)?;
            let rest = symbol.strip_prefix("bpf_prog_")?;
            let (tag, name) = rest.split_once('_')?;
            Some((tag.to_owned(), name.to_owned()))
        })
        .collect()
}

/// kernel.bpf_stats_enabled set to 1 while alive, then restored.
pub(super) struct BpfStatsSwitch {
    previous: String,
}

pub(super) const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStatsSwitch {
    pub(super) fn enable() -> Option<Self> {
        let previous = fs::read_to_string(BPF_STATS).ok()?.trim().to_owned();
        match fs::write(BPF_STATS, "1") {
            Ok(()) => Some(Self { previous }),
            Err(err) => {
                eprintln!("warning: cannot enable {BPF_STATS} ({err}): BPF time not measured");
                None
            }
        }
    }
}

impl Drop for BpfStatsSwitch {
    fn drop(&mut self) {
        if let Err(err) = fs::write(BPF_STATS, &self.previous) {
            eprintln!(
                "warning: could not restore {BPF_STATS} to {}: {err}",
                self.previous
            );
        }
    }
}

/// A tracer running in the background, its output read by threads (so it never blocks on a
/// full pipe). Dropping it kills the process, so an error anywhere leaves nothing behind.
pub(super) struct Background {
    name: &'static str,
    pub(super) child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Background {
    pub(super) fn spawn(name: &'static str, command: &mut Command) -> Result<Self> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start `{}`", describe(command)))?;
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().context("no stdout pipe")?;
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().context("no stderr pipe")?;
        let stderr = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(Self {
            name,
            child,
            lines,
            seen: Vec::new(),
            stderr: Some(stderr),
        })
    }

    pub(super) fn wait_line(&mut self, timeout: Duration) -> Result<()> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                self.seen.push(line);
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => bail!("{} printed nothing in {timeout:?}", self.name),
            Err(RecvTimeoutError::Disconnected) => self.died(),
        }
    }

    pub(super) fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(_) => self.died(),
        }
    }

    fn died(&mut self) -> Result<()> {
        let status = self.child.wait()?;
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        bail!("{} exited early ({status}): {}", self.name, stderr.trim())
    }

    /// SIGINT (both tools print their final report on it), then its stdout lines and the
    /// time it took to exit.
    pub(super) fn stop(mut self) -> Result<(Vec<String>, Duration)> {
        let sent = Instant::now();
        run(cmd("kill").args(["-INT", &self.child.id().to_string()]))?;
        let deadline = sent + Duration::from_secs(10);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                eprintln!("warning: {} ignored SIGINT for 10 s: killing it", self.name);
                self.child.kill()?;
                self.child.wait()?;
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
        let took = sent.elapsed();
        let mut lines = std::mem::take(&mut self.seen);
        // The reader thread ends at EOF, which closes the channel.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            lines.push(line);
        }
        Ok((lines, took))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // No-op for a process already reaped by stop().
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
