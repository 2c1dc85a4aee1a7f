//! What the probe plan knows of the kernel: the answers to the questions it asks of the
//! kernel's BTF and tracefs, and what the process may do here (capabilities,
//! `perf_event_open`, how BPF memory is charged).
//!
//! On a live host the questions go to the kernel and every answer is recorded as it is
//! given; `iotop-bpf check --facts` prints the record as JSON. The same record, captured in
//! each kernel of the matrix (`probe/tests/data/kernels/`), answers the same questions in the
//! plan's unit tests, so the plan is tested against real kernels without booting them. A
//! question the record never saw answers "absent" and is listed ([`KernelFacts::unanswered`]):
//! the tests fail on it, which says a fixture needs capturing again.

use std::{cell::RefCell, collections::BTreeMap};

use serde::{Deserialize, Serialize};

use crate::{
    access::Access,
    btf::{Btf, Param},
    tracefs::{EventFormat, Tracefs},
};

/// A struct member, from BTF.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberFact {
    pub bit_offset: u32,
    /// Bytes (0 where BTF does not say).
    pub size: u32,
}

impl MemberFact {
    pub fn offset(self) -> u32 {
        self.bit_offset / 8
    }
}

/// The resolution of `CLOCK_MONOTONIC_COARSE`: one jiffy (the kernel reports `TICK_NSEC`).
fn coarse_clock_resolution_ns() -> Option<u64> {
    let mut res = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec we own.
    let ok = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &raw mut res) } == 0;
    let ns = u64::try_from(res.tv_sec).ok()? * 1_000_000_000 + u64::try_from(res.tv_nsec).ok()?;
    // A jiffy is 1 to 10 ms (HZ 1000 to 100); anything else is not one.
    (ok && (1_000_000..=10_000_000).contains(&ns)).then_some(ns)
}

/// This kernel's lockdown mode and what it takes from the probes, for `check`.
pub fn lockdown_here() -> Option<String> {
    let mode = lockdown_mode(&std::fs::read_to_string("/sys/kernel/security/lockdown").ok()?)?;
    let takes = match mode.as_str() {
        "none" => "",
        "confidentiality" => {
            ": BPF may not read kernel memory (bpf_probe_read_kernel) and tracefs shows no events"
        }
        _ => " (takes nothing the probes use)",
    };
    Some(format!("{mode}{takes}"))
}

/// The mode `/sys/kernel/security/lockdown` shows in brackets: `none [integrity]
/// confidentiality` is `integrity`.
fn lockdown_mode(modes: &str) -> Option<String> {
    let start = modes.find('[')? + 1;
    let end = start + modes[start..].find(']')?;
    Some(modes[start..end].to_string())
}

/// The record of what the kernel answered, and the live kernel while gathering.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct KernelFacts {
    pub release: String,
    /// Why there is no kernel BTF, if there is none.
    pub btf_error: Option<String>,
    /// Why tracefs cannot be read, if it cannot.
    pub tracefs_error: Option<String>,
    pub access: Access,
    /// Filesystems this kernel knows (`/proc/filesystems`), for notes on what a process here
    /// could use.
    pub filesystems: Vec<String>,
    /// The kernel's tick (a jiffy), ns: the resolution of `CLOCK_MONOTONIC_COARSE`, which is
    /// exactly that (`1e9 / HZ`). `None` where it was not recorded.
    #[serde(default)]
    pub tick_ns: Option<u64>,
    /// The kernel's lockdown mode (`none`, `integrity`, `confidentiality`), from
    /// `/sys/kernel/security/lockdown`; `None` where it cannot be read (no lockdown LSM, or
    /// securityfs not mounted).
    #[serde(default)]
    pub lockdown: Option<String>,
    members: RefCell<BTreeMap<String, Option<MemberFact>>>,
    enums: RefCell<BTreeMap<String, Option<i64>>>,
    raw: RefCell<BTreeMap<String, Option<Vec<Param>>>>,
    events: RefCell<BTreeMap<String, Option<EventFormat>>>,
    #[serde(default)]
    functions: RefCell<BTreeMap<String, Option<Vec<Param>>>>,
    #[serde(skip)]
    live: Option<Live>,
    #[serde(skip)]
    unanswered: RefCell<Vec<String>>,
}

struct Live {
    btf: Option<Btf>,
    tracefs: Option<Tracefs>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the live kernel")
    }
}

impl KernelFacts {
    /// The live kernel: its BTF (with the modules'), tracefs when readable, and what this
    /// process may do.
    pub fn gather(release: String, tracefs: Result<Tracefs, String>) -> Self {
        let (btf, btf_error) = match Btf::from_sys_fs_with_modules() {
            Ok(btf) => (Some(btf), None),
            Err(e) => (None, Some(e)),
        };
        let (tracefs, tracefs_error) = match tracefs {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e)),
        };
        let filesystems = std::fs::read_to_string("/proc/filesystems")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().last().map(str::to_string))
            .collect();
        let access = crate::access::probe(tracefs.as_ref());
        Self {
            release,
            btf_error,
            tracefs_error,
            access,
            filesystems,
            tick_ns: coarse_clock_resolution_ns(),
            lockdown: std::fs::read_to_string("/sys/kernel/security/lockdown")
                .ok()
                .and_then(|modes| lockdown_mode(&modes)),
            live: Some(Live { btf, tracefs }),
            ..Self::default()
        }
    }

    /// A captured record (JSON from `check --facts`).
    #[cfg(test)]
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Questions a captured record could not answer (empty on a live kernel).
    #[cfg(test)]
    pub fn unanswered(&self) -> Vec<String> {
        self.unanswered.borrow().clone()
    }

    /// Whether the kernel has BTF (then raw tracepoints and kernel objects can be read).
    pub fn has_btf(&self) -> bool {
        self.btf_error.is_none()
    }

    fn ask<T: Clone>(
        &self,
        map: &RefCell<BTreeMap<String, Option<T>>>,
        key: String,
        live: impl FnOnce(&Live) -> Option<T>,
    ) -> Option<T> {
        if let Some(answer) = map.borrow().get(&key) {
            return answer.clone();
        }
        match &self.live {
            Some(l) => {
                let answer = live(l);
                map.borrow_mut().insert(key, answer.clone());
                answer
            }
            None => {
                self.unanswered.borrow_mut().push(key);
                None
            }
        }
    }

    /// `strukt.member`, looking into anonymous unions and structs.
    pub fn member(&self, strukt: &str, member: &str) -> Option<MemberFact> {
        self.ask(&self.members, format!("{strukt}.{member}"), |l| {
            let btf = l.btf.as_ref()?;
            Some(MemberFact {
                bit_offset: btf.member_bit_offset(strukt, member).ok()?,
                size: btf.member_size(strukt, member).unwrap_or(0),
            })
        })
    }

    /// Byte offset of `strukt.member`.
    pub fn offset(&self, strukt: &str, member: &str) -> Option<u32> {
        self.member(strukt, member).map(MemberFact::offset)
    }

    pub fn enum_value(&self, name: &str) -> Option<i64> {
        self.ask(&self.enums, name.to_string(), |l| {
            l.btf.as_ref()?.enum_value(name).ok()
        })
    }

    /// The arguments of raw tracepoint `tracepoint`, or `None` where the kernel (or a loaded
    /// module) has no such tracepoint in its BTF.
    pub fn raw_tracepoint(&self, tracepoint: &str) -> Option<Vec<Param>> {
        self.ask(&self.raw, tracepoint.to_string(), |l| {
            l.btf.as_ref()?.raw_tracepoint_params(tracepoint).ok()
        })
    }

    /// The parameters of kernel function `name`, or `None` where its BTF has no such
    /// function.
    pub fn function(&self, name: &str) -> Option<Vec<Param>> {
        self.ask(&self.functions, name.to_string(), |l| {
            l.btf.as_ref()?.function_params(name).ok()
        })
    }

    /// The tracefs format of classic tracepoint `category:name`, `None` where absent or
    /// tracefs is unreadable.
    pub fn event(&self, category: &str, name: &str) -> Option<EventFormat> {
        self.ask(&self.events, format!("{category}:{name}"), |l| {
            l.tracefs.as_ref()?.format(category, name).ok().flatten()
        })
    }

    /// Why BPF may not read kernel memory here (`bpf_probe_read_kernel`, which the raw
    /// tracepoints' probes read their kernel objects with), if it may not.
    pub fn lockdown_refuses_reads(&self) -> Option<String> {
        (self.lockdown.as_deref() == Some("confidentiality")).then(|| {
            "kernel lockdown=confidentiality refuses BPF reads of kernel memory (bpf_probe_read_kernel)"
                .to_string()
        })
    }

    /// Whether this kernel knows filesystem `fs`.
    pub fn knows_filesystem(&self, fs: &str) -> bool {
        self.filesystems.iter().any(|f| f == fs)
    }

    /// The same record with other access (for tests of least privilege).
    #[cfg(test)]
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }
}

/// Where the captured records of the kernel matrix are.
#[cfg(test)]
pub fn fixture(kernel: &str) -> KernelFacts {
    let path = format!(
        "{}/tests/data/kernels/{kernel}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    KernelFacts::from_json(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_lockdown_mode_is_the_bracketed_one() {
        assert_eq!(
            super::lockdown_mode("none integrity [confidentiality]\n").as_deref(),
            Some("confidentiality")
        );
        assert_eq!(
            super::lockdown_mode("[none] integrity confidentiality\n").as_deref(),
            Some("none")
        );
        assert_eq!(super::lockdown_mode(""), None);
    }
}
