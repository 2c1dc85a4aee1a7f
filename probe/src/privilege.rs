//! The environment check that runs before anything is loaded: privileges and tracefs.
//! Every missing piece is named in one message, capabilities by name. Whether the kernel can
//! run the probes is the plan's to decide, from its BTF (`plan.rs`), not from a version.
//!
//! What each capability is for (docs/kernels.md, Requirements):
//!
//! - `CAP_BPF`: create maps, load programs;
//! - `CAP_PERFMON`: load tracing programs, read kernel memory from them, take stack traces
//!   (raw tracepoints need nothing more to attach);
//! - `CAP_SYS_RESOURCE`: raise RLIMIT_MEMLOCK where BPF memory is charged to it (kernels
//!   before 5.11);
//! - `CAP_DAC_READ_SEARCH`: read tracefs (mode 0700 on recent kernels), which only the
//!   classic-tracepoint fallbacks need; also to enter other users' `/proc/PID/fd`;
//! - `CAP_SYS_PTRACE`: read the links in other users' `/proc/PID/fd` (which file a process
//!   synced) and their `/proc/PID/wchan`;
//! - `CAP_SYSLOG`: see kernel addresses in /proc/kallsyms when `kernel.kptr_restrict` >= 1
//!   or `kernel.perf_event_paranoid` >= 2 (D-state wait sites as function names);
//! - `CAP_SYS_ADMIN` (root) grants the first two, mounts tracefs if it is not mounted, lets
//!   classic tracepoints attach where `kernel.perf_event_paranoid` > 2 (Debian, Ubuntu), and
//!   reads `/proc/PID/stack` of threads already in D at start.
//!
//! The first two are required; without the others a feature degrades, with a note.

use std::fmt;

use crate::tracefs::{Tracefs, TracefsError};

const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
#[cfg(test)]
const CAP_SYSLOG: u32 = 34;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// What the check found usable.
#[derive(Clone, Debug)]
pub struct Environment {
    pub kernel_release: String,
    /// tracefs, or why it cannot be read (only the classic-tracepoint fallbacks need it).
    pub tracefs: Result<Tracefs, String>,
    /// Features that work less well for lack of a capability, each naming it (shown with
    /// the probes' notes).
    pub degraded: Vec<String>,
}

/// Everything that stops iotop-bpf from running here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvironmentError {
    pub problems: Vec<String>,
}

impl fmt::Display for EnvironmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot start:")?;
        for problem in &self.problems {
            write!(f, "\n  - {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for EnvironmentError {}

/// An effective capability set (`CapEff:` of /proc/self/status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Caps(u64);

impl Caps {
    fn has(self, cap: u32) -> bool {
        self.0 & (1 << cap) != 0
    }

    /// CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN which grants both: the ones missing.
    fn missing_for_probes(self) -> Vec<&'static str> {
        if self.has(CAP_SYS_ADMIN) {
            return Vec::new();
        }
        [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
            .into_iter()
            .filter(|&(cap, _)| !self.has(cap))
            .map(|(_, name)| name)
            .collect()
    }

    fn reads_any_file(self) -> bool {
        self.has(CAP_DAC_READ_SEARCH) || self.has(CAP_DAC_OVERRIDE)
    }

    /// What works less well without the optional capabilities.
    fn degraded(self) -> Vec<String> {
        let mut notes = Vec::new();
        let for_fds: Vec<&str> = [
            (!self.has(CAP_SYS_PTRACE)).then_some("CAP_SYS_PTRACE"),
            (!self.reads_any_file()).then_some("CAP_DAC_READ_SEARCH"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !for_fds.is_empty() {
            notes.push(format!(
                "no {}: files other users' processes sync are not named from /proc/PID/fd",
                for_fds.join(" or ")
            ));
        }
        if !self.has(CAP_SYS_ADMIN) {
            notes.push(
                "no CAP_SYS_ADMIN: threads already in D state at start show one frame (/proc/PID/wchan), not their /proc/PID/stack; the probes' own cost (BPF time per I/O) is measured only while kernel.bpf_stats_enabled is 1"
                    .to_string(),
            );
        }
        notes
    }
}

pub fn check() -> Result<Environment, EnvironmentError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    check_with(Caps(effective_caps(&status)), Tracefs::locate_or_mount)
}

/// The check, with the capabilities and the tracefs lookup given (for tests).
fn check_with(
    caps: Caps,
    tracefs: impl FnOnce(bool) -> Result<Tracefs, TracefsError>,
) -> Result<Environment, EnvironmentError> {
    let missing = caps.missing_for_probes();
    if !missing.is_empty() {
        return Err(EnvironmentError {
            problems: vec![format!(
                "needs root, or the capabilities CAP_BPF and CAP_PERFMON to load eBPF probes (missing: {}): run it as `sudo iotop-bpf`, or see docs/kernels.md for the capability set",
                missing.join(", ")
            )],
        });
    }
    let mut degraded = caps.degraded();
    // Raw tracepoints need no tracefs: its absence only rules out the classic fallbacks.
    let confidential =
        crate::facts::lockdown_here().is_some_and(|m| m.starts_with("confidentiality"));
    let tracefs = tracefs(caps.has(CAP_SYS_ADMIN)).map_err(|e| match e {
        // Mounted or not, it shows no events there: nothing to mount or grant.
        _ if confidential => "kernel lockdown=confidentiality hides its events: only the classic-tracepoint fallbacks are lost".to_string(),
        TracefsError::Unreadable { .. } if !caps.reads_any_file() => format!(
            "{e}; without it only the classic-tracepoint fallbacks are lost (grant CAP_DAC_READ_SEARCH for them)"
        ),
        e => e.to_string(),
    });
    if let Err(why) = &tracefs {
        degraded.push(format!("tracefs: {why}"));
    }
    Ok(Environment {
        kernel_release: kernel_release(),
        tracefs,
        degraded,
    })
}

/// The `CapEff:` mask of a `/proc/<pid>/status` text.
fn effective_caps(status: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0)
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(names: &[u32]) -> Caps {
        Caps(names.iter().fold(0, |mask, cap| mask | (1 << cap)))
    }

    fn closed() -> Result<Tracefs, TracefsError> {
        Err(TracefsError::Unreadable {
            root: "/sys/kernel/tracing".into(),
            mode: 0o700,
            uid: 0,
        })
    }

    #[test]
    fn capabilities() {
        let root = Caps(effective_caps("Name:\tx\nCapEff:\t000001ffffffffff\n"));
        assert!(root.missing_for_probes().is_empty());
        assert!(root.degraded().is_empty(), "root lacks nothing");
        // Root in this sandbox: no CAP_SYS_RESOURCE, still enough.
        let sandbox = format!("CapEff:\t{:016x}\n", (1u64 << CAP_BPF) | (1 << CAP_PERFMON));
        assert!(
            Caps(effective_caps(&sandbox))
                .missing_for_probes()
                .is_empty()
        );
        assert_eq!(
            Caps(effective_caps("CapEff:\t0000000000000000\n")).missing_for_probes(),
            ["CAP_BPF", "CAP_PERFMON"]
        );
        assert_eq!(caps(&[CAP_BPF]).missing_for_probes(), ["CAP_PERFMON"]);
        assert_eq!(caps(&[CAP_SYS_ADMIN]).missing_for_probes(), [""; 0]);
        assert_eq!(effective_caps("garbage"), 0);
    }

    #[test]
    fn a_closed_tracefs_costs_only_the_classic_fallbacks() {
        let env = check_with(caps(&[CAP_BPF, CAP_PERFMON]), |_| closed()).unwrap();
        let why = env.tracefs.unwrap_err();
        assert!(
            why.contains("CAP_DAC_READ_SEARCH") && why.contains("classic"),
            "{why}"
        );
        assert!(
            env.degraded.iter().any(|d| d.starts_with("tracefs: ")),
            "{:?}",
            env.degraded
        );
        // Nothing at all: the probe capabilities are named, and the way out.
        let text = check_with(caps(&[]), |_| closed()).unwrap_err().to_string();
        assert!(
            text.contains("missing: CAP_BPF, CAP_PERFMON")
                && text.contains("needs root")
                && text.contains("sudo iotop-bpf"),
            "{text}"
        );
        // A readable tracefs, no CAP_SYS_ADMIN: it is not mounted over.
        let open = |may_mount: bool| {
            assert!(!may_mount, "no CAP_SYS_ADMIN, no mount");
            Ok(Tracefs::at("/sys/kernel/tracing"))
        };
        let env = check_with(caps(&[CAP_BPF, CAP_PERFMON]), open).unwrap();
        assert!(env.tracefs.is_ok());
        assert!(
            env.degraded
                .iter()
                .any(|n| n.starts_with("no CAP_SYS_PTRACE or CAP_DAC_READ_SEARCH:")),
            "{:?}",
            env.degraded
        );
        // Not mounted, and no CAP_SYS_ADMIN to mount it: said, not fatal.
        let env = check_with(caps(&[CAP_BPF, CAP_PERFMON]), |may_mount| {
            assert!(!may_mount);
            Err(TracefsError::NotMountedNoPrivilege)
        })
        .unwrap();
        let why = env.tracefs.unwrap_err();
        assert!(
            why.contains("CAP_SYS_ADMIN") && why.contains("mount -t tracefs"),
            "{why}"
        );
        // The documented set loses nothing but what needs root.
        let documented = caps(&[
            CAP_BPF,
            CAP_PERFMON,
            CAP_DAC_READ_SEARCH,
            CAP_SYS_PTRACE,
            CAP_SYSLOG,
        ]);
        assert_eq!(
            documented.degraded().len(),
            1,
            "{:?}",
            documented.degraded()
        );
        let no_ptrace = caps(&[CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH]).degraded();
        assert!(
            no_ptrace[0].starts_with("no CAP_SYS_PTRACE: files other users'"),
            "{no_ptrace:?}"
        );
    }

    #[test]
    fn the_message_names_every_problem() {
        let err = EnvironmentError {
            problems: vec!["a".into(), "b".into()],
        };
        assert_eq!(err.to_string(), "cannot start:\n  - a\n  - b");
    }
}
