//! The environment check that runs before anything is loaded: privileges, kernel version,
//! tracefs. Every missing piece is named in one message.

use std::fmt;

use super::tracefs::Tracefs;

const CAP_SYS_ADMIN: u32 = 21;
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

pub fn check() -> Result<Environment, EnvironmentError> {
    let mut problems = Vec::new();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = effective_caps(&status);
    let privileged = has_bpf_privileges(caps);
    if !privileged {
        problems.push(
            "needs root, or the capabilities CAP_BPF and CAP_PERFMON, to load eBPF probes: run it as `sudo iotop-bpf`"
                .to_string(),
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

    // Mounting tracefs needs privileges: without them, report only the privilege problem.
    let tracefs = if privileged {
        match Tracefs::locate_or_mount() {
            Ok(tracefs) => Some(tracefs),
            Err(e) => {
                problems.push(e.to_string());
                None
            }
        }
    } else {
        None
    };

    match (tracefs, kernel) {
        (Some(tracefs), Some(kernel)) if problems.is_empty() => Ok(Environment {
            kernel_release: release,
            kernel,
            tracefs,
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

/// CAP_BPF + CAP_PERFMON is enough on 5.8+; CAP_SYS_ADMIN alone also grants both.
fn has_bpf_privileges(caps: u64) -> bool {
    let has = |cap: u32| caps & (1 << cap) != 0;
    (has(CAP_BPF) && has(CAP_PERFMON)) || has(CAP_SYS_ADMIN)
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

    #[test]
    fn capabilities() {
        let root = "Name:\tx\nCapEff:\t000001ffffffffff\n";
        assert!(has_bpf_privileges(effective_caps(root)));
        // Root in this sandbox: no CAP_SYS_RESOURCE, still enough.
        let sandbox = format!("CapEff:\t{:016x}\n", (1u64 << CAP_BPF) | (1 << CAP_PERFMON));
        assert!(has_bpf_privileges(effective_caps(&sandbox)));
        assert!(!has_bpf_privileges(effective_caps(
            "CapEff:\t0000000000000000\n"
        )));
        assert!(!has_bpf_privileges(effective_caps(&format!(
            "CapEff:\t{:x}\n",
            1u64 << CAP_BPF
        ))));
        assert!(!has_bpf_privileges(effective_caps("garbage")));
    }

    #[test]
    fn the_message_names_every_problem() {
        let err = EnvironmentError {
            problems: vec!["a".into(), "b".into()],
        };
        assert_eq!(err.to_string(), "cannot start:\n  - a\n  - b");
    }
}
