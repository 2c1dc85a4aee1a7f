//! The environment check that runs before anything is loaded: privileges, kernel version,
//! tracefs. Every missing piece is named in one message, capabilities by name.
//!
//! What each capability is for (README, Requirements):
//!
//! - `CAP_BPF`: create maps, load programs;
//! - `CAP_PERFMON`: attach tracing programs (`perf_event_open`), read kernel memory from them,
//!   take stack traces;
//! - `CAP_DAC_READ_SEARCH`: read tracefs `format` and `id` files when tracefs is mode 0700
//!   (recent kernels); also to enter other users' `/proc/PID/fd`;
//! - `CAP_SYS_PTRACE`: read the links in other users' `/proc/PID/fd` (which file a process
//!   synced) and their `/proc/PID/wchan`;
//! - `CAP_SYSLOG`: see kernel addresses in /proc/kallsyms when `kernel.kptr_restrict` >= 1
//!   or `kernel.perf_event_paranoid` >= 2 (D-state wait sites as function names);
//! - `CAP_SYS_ADMIN` (root) grants the first two, mounts tracefs if it is not mounted, and
//!   reads `/proc/PID/stack` of threads already in D at start.
//!
//! The first three are required; without the others a feature degrades, with a note.

use std::fmt;

use super::tracefs::{Tracefs, TracefsError};

const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
#[cfg(test)]
const CAP_SYSLOG: u32 = 34;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
/// BPF ring buffers, CAP_BPF and CAP_PERFMON all arrived in 5.8.
const MIN_KERNEL: (u32, u32) = (5, 8);

/// What the check found usable.
#[derive(Clone, Debug)]
pub struct Environment {
    pub kernel_release: String,
    pub kernel: (u32, u32),
    pub tracefs: Tracefs,
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
                "no CAP_SYS_ADMIN: threads already in D state at start show one frame (/proc/PID/wchan), not their /proc/PID/stack"
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
    let mut problems = Vec::new();
    let mut missing = caps.missing_for_probes();
    let tracefs = match tracefs(caps.has(CAP_SYS_ADMIN)) {
        Ok(tracefs) => Some(tracefs),
        Err(TracefsError::Unreadable { .. }) if !caps.reads_any_file() => {
            missing.push("CAP_DAC_READ_SEARCH");
            None
        }
        // Without the probe capabilities, mounting is moot: report only those.
        Err(TracefsError::NotMountedNoPrivilege) if !missing.is_empty() => None,
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    if !missing.is_empty() {
        let tracefs_closed = missing.contains(&"CAP_DAC_READ_SEARCH");
        problems.insert(
            0,
            format!(
                "needs root, or the capabilities CAP_BPF, CAP_PERFMON{} to load eBPF probes (missing: {}): run it as `sudo iotop-bpf`, or see the README's Requirements for the capability set",
                if tracefs_closed {
                    " and CAP_DAC_READ_SEARCH (tracefs is readable by root only here)"
                } else {
                    ""
                },
                missing.join(", ")
            ),
        );
    }

    let release = kernel_release();
    let kernel = parse_kernel_version(&release);
    match kernel {
        Some(version) if version >= MIN_KERNEL => {}
        Some((major, minor)) => problems.push(format!(
            "needs Linux {}.{} or newer for BPF ring buffers; this is {major}.{minor} ({release})",
            MIN_KERNEL.0, MIN_KERNEL.1
        )),
        None => problems.push(format!("cannot tell the kernel version from {release:?}")),
    }

    match (tracefs, kernel) {
        (Some(tracefs), Some(kernel)) if problems.is_empty() => Ok(Environment {
            kernel_release: release,
            kernel,
            tracefs,
            degraded: caps.degraded(),
        }),
        _ => Err(EnvironmentError { problems }),
    }
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

/// `6.18.44-fc-v657` -> `(6, 18)`.
fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions() {
        assert_eq!(parse_kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(parse_kernel_version("5.8.0"), Some((5, 8)));
        assert_eq!(parse_kernel_version("4.19"), Some((4, 19)));
        assert_eq!(parse_kernel_version(""), None);
        assert_eq!(parse_kernel_version("x"), None);
    }

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
    fn a_closed_tracefs_names_cap_dac_read_search_not_a_missing_mount() {
        let err = check_with(caps(&[CAP_BPF, CAP_PERFMON]), |_| closed()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("missing: CAP_DAC_READ_SEARCH"), "{text}");
        assert!(!text.contains("not mounted"), "{text}");
        // Nothing at all: every capability is named, and the way out.
        let text = check_with(caps(&[]), |_| closed()).unwrap_err().to_string();
        assert!(
            text.contains("missing: CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH")
                && text.contains("needs root")
                && text.contains("sudo iotop-bpf"),
            "{text}"
        );
        // A readable tracefs: the two probe capabilities suffice.
        let open = |may_mount: bool| {
            assert!(!may_mount, "no CAP_SYS_ADMIN, no mount");
            Ok(Tracefs::at("/sys/kernel/tracing"))
        };
        let env = check_with(caps(&[CAP_BPF, CAP_PERFMON]), open);
        if parse_kernel_version(&kernel_release()).is_some_and(|v| v >= MIN_KERNEL) {
            let env = env.unwrap();
            assert!(
                env.degraded
                    .iter()
                    .any(|n| n.starts_with("no CAP_SYS_PTRACE or CAP_DAC_READ_SEARCH:")),
                "{:?}",
                env.degraded
            );
        }
        // Not mounted, and no CAP_SYS_ADMIN to mount it: say so.
        let text = check_with(caps(&[CAP_BPF, CAP_PERFMON]), |may_mount| {
            assert!(!may_mount);
            Err(TracefsError::NotMountedNoPrivilege)
        })
        .unwrap_err()
        .to_string();
        assert!(
            text.contains("CAP_SYS_ADMIN") && text.contains("mount -t tracefs"),
            "{text}"
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
