//! The smoke set's `other calls` cell: what a loop of `getppid` makes the tool's programs
//! run, where the system-call probes ride trampolines and where they run on every call.

use std::{process::Command, time::SystemTime};

use iotop_bpf_integration::binary;
use serde_json::Value;

use super::Cell;

/// `getppid` calls for the `other calls` cell: a probe on every system call would run 2 per
/// call, many times what everything else runs meanwhile (hundreds, in a guest).
pub const OTHER_CALLS: u64 = 100_000;

/// `kernel.bpf_stats_enabled` on while alive, then as it was.
pub struct BpfStats(Option<String>);

impl BpfStats {
    const PATH: &str = "/proc/sys/kernel/bpf_stats_enabled";

    pub fn on() -> Self {
        let before = std::fs::read_to_string(Self::PATH).ok();
        let _ = std::fs::write(Self::PATH, "1");
        Self(before)
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Some(before) = &self.0 {
            let _ = std::fs::write(Self::PATH, before.trim());
        }
    }
}

/// Where `check` says the system-call probes run: its `system calls:` line.
pub fn syscall_path() -> String {
    Command::new(binary())
        .arg("check")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("system calls: "))
        .unwrap_or("not named")
        .to_string()
}

/// The `other calls` cell: [`OTHER_CALLS`] calls of `getppid` made first in the run, with
/// nothing else until the interval they end in has closed, and the kernel keeping BPF
/// statistics. Where `check` says the system-call probes ride trampolines (or none run,
/// under lockdown), all of the tool's programs together must run fewer times than a tenth
/// of the calls meanwhile; on raw `sys_enter`/`sys_exit`, at least once per call (or the
/// count could not see them either way).
pub fn other_calls_cell(path: &str, timed: &[(SystemTime, Value)], loop_end: SystemTime) -> Cell {
    // Every interval up to the first that arrived after the loop ended.
    let upto = timed
        .iter()
        .position(|(arrived, _)| *arrived > loop_end)
        .ok_or("no interval after the getppid loop")?;
    if timed[..=upto]
        .iter()
        .any(|(_, i)| i["events"]["bpf_runs"].is_null())
    {
        return Err("the kernel kept no BPF statistics for an interval of the loop".into());
    }
    let runs: u64 = timed[..=upto]
        .iter()
        .filter_map(|(_, i)| i["events"]["bpf_runs"].as_u64())
        .sum();
    #[expect(clippy::cast_precision_loss, reason = "a ratio of counts")]
    let seen = format!(
        "{OTHER_CALLS} getppid calls, {runs} program runs in all ({:.3} per call)",
        runs as f64 / OTHER_CALLS as f64
    );
    let word = path.split([':', ' ']).next().unwrap_or_default();
    match word {
        "trampolines" | "none" if runs < OTHER_CALLS / 10 => Ok(format!("{word}: {seen}")),
        "raw" if runs >= OTHER_CALLS => Ok(format!("raw sys_enter/sys_exit: {seen}")),
        _ => Err(format!("system calls: {path}, yet {seen}")),
    }
}
