//! What this process may do here, found by trying rather than by reading a version:
//! whether `perf_event_open` of a tracepoint works (classic tracepoints need it; Debian and
//! Ubuntu refuse it without CAP_SYS_ADMIN when `kernel.perf_event_paranoid` is above 2), and
//! whether BPF memory is charged to RLIMIT_MEMLOCK (kernels before 5.11) or to the memory
//! cgroup.

use std::io;

use serde::{Deserialize, Serialize};

use crate::tracefs::Tracefs;

/// How BPF memory is charged here (measured, not assumed from a version).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Memlock {
    /// To the memory cgroup (5.11+): RLIMIT_MEMLOCK does not matter.
    #[default]
    Cgroup,
    /// To RLIMIT_MEMLOCK (before 5.11): the limit must be raised before loading.
    Rlimit,
    /// Could not be told (no map could be created at all).
    Unknown,
}

/// What this process may do here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// Effective capabilities (`CapEff`).
    pub caps: u64,
    /// `kernel.perf_event_paranoid`, when readable.
    pub perf_event_paranoid: Option<i32>,
    /// Whether `perf_event_open` of a tracepoint works for this process: what classic
    /// tracepoints need (tried, not inferred; `Err`: the error).
    pub perf_event_open: Result<(), String>,
    pub memlock: Memlock,
    /// RLIMIT_MEMLOCK's hard limit (`None`: unlimited).
    pub memlock_hard: Option<u64>,
}

impl Default for Access {
    fn default() -> Self {
        Self {
            caps: 0,
            perf_event_paranoid: None,
            perf_event_open: Err("not tried".to_string()),
            memlock: Memlock::default(),
            memlock_hard: None,
        }
    }
}

pub const CAP_SYS_RESOURCE: u32 = 24;

impl Access {
    pub fn has(&self, cap: u32) -> bool {
        self.caps & (1 << cap) != 0
    }
}

pub fn probe(tracefs: Option<&Tracefs>) -> Access {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let (memlock, memlock_hard) = memlock();
    Access {
        caps,
        perf_event_paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        perf_event_open: perf_event_open(tracefs),
        memlock,
        memlock_hard,
    }
}

/// Opens (and closes) a perf event on a tracepoint the way a classic tracepoint program is
/// attached: every CPU's tasks, CPU 0.
fn perf_event_open(tracefs: Option<&Tracefs>) -> Result<(), String> {
    let tracefs = tracefs.ok_or("tracefs is not readable here")?;
    let id = tracefs
        .format("sched", "sched_process_exit")
        .ok()
        .flatten()
        .ok_or("no sched:sched_process_exit tracepoint to try it on")?
        .id;
    // struct perf_event_attr, its first version (64 bytes): type, size, config,
    // sample_period, sample_type, read_format, flags, wakeup_events, bp_type, config1.
    let mut attr = [0u8; 64];
    attr[0..4].copy_from_slice(&2u32.to_ne_bytes()); // PERF_TYPE_TRACEPOINT
    attr[4..8].copy_from_slice(&64u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&u64::from(id).to_ne_bytes());
    attr[48..52].copy_from_slice(&1u32.to_ne_bytes()); // wakeup_events
    // SAFETY: a valid attr buffer of the size it declares; the fd is closed below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            -1i32,
            0i32,
            -1i32,
            libc::c_ulong::from(8u32), // PERF_FLAG_FD_CLOEXEC
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error().to_string());
    }
    // Closing a tracepoint's perf event waits for an RCU grace period (~30-50 ms here, more
    // under load), which would hold up start-up: the answer is known, so it is closed on a
    // thread of its own.
    let fd = fd as i32;
    let closer = std::thread::Builder::new()
        .name("perf-probe-close".into())
        // SAFETY: our own fd, closed once, by whichever of the two paths runs.
        .spawn(move || unsafe { libc::close(fd) });
    if closer.is_err() {
        // SAFETY: as above (the thread did not start).
        unsafe { libc::close(fd) };
    }
    Ok(())
}

/// Creates a one-entry BPF array; the fd, or the error.
fn create_map() -> io::Result<()> {
    // union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size, max_entries,
    // map_flags (a shorter attr is accepted: the kernel zero-fills the rest).
    let attr: [u32; 5] = [2, 4, 8, 1, 0]; // BPF_MAP_TYPE_ARRAY
    // SAFETY: a valid attr buffer of the size passed; the fd is closed below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            0i32, // BPF_MAP_CREATE
            attr.as_ptr(),
            std::mem::size_of_val(&attr) as u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: our own fd.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

fn rlimit() -> Option<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct.
    (unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } == 0).then_some(limit)
}

/// How BPF memory is charged: a map is created with the soft limit at 0 (then restored);
/// where that fails with EPERM and succeeds with the limit as it was, the limit counts.
fn memlock() -> (Memlock, Option<u64>) {
    let Some(before) = rlimit() else {
        return (Memlock::Unknown, None);
    };
    let hard = (before.rlim_max != libc::RLIM_INFINITY).then_some(before.rlim_max);
    match create_map() {
        Ok(()) => {}
        // The limit may be used up already (a previous run's maps are freed lazily): with the
        // soft limit at the hard one (or unlimited, where allowed), a success says it counts.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            let raised = libc::rlimit {
                rlim_cur: before.rlim_max,
                rlim_max: before.rlim_max,
            };
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            // SAFETY: valid rlimit structs; the limit is restored below.
            let charged = unsafe {
                let ok = libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) == 0
                    || libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) == 0;
                let result = ok && create_map().is_ok();
                libc::setrlimit(libc::RLIMIT_MEMLOCK, &before);
                result
            };
            return (
                if charged {
                    Memlock::Rlimit
                } else {
                    Memlock::Unknown
                },
                hard,
            );
        }
        Err(_) => return (Memlock::Unknown, hard),
    }
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: before.rlim_max,
    };
    // SAFETY: valid rlimit structs; lowering the soft limit needs no privilege and
    // restoring it to at most the hard limit neither.
    let charged = unsafe {
        if libc::setrlimit(libc::RLIMIT_MEMLOCK, &zero) != 0 {
            return (Memlock::Unknown, hard);
        }
        let result = create_map();
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &before);
        matches!(result, Err(e) if e.raw_os_error() == Some(libc::EPERM))
    };
    (
        if charged {
            Memlock::Rlimit
        } else {
            Memlock::Cgroup
        },
        hard,
    )
}

/// Where BPF memory counts against RLIMIT_MEMLOCK, raises it so that the maps fit: to
/// unlimited, which needs CAP_SYS_RESOURCE unless the hard limit already is. Says what to
/// grant when it cannot.
pub fn raise_memlock(access: &Access) -> Result<(), String> {
    if access.memlock == Memlock::Cgroup {
        return Ok(());
    }
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads a valid rlimit struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } == 0
        // Not known to count: try, and let the maps' creation say if it mattered.
        || access.memlock == Memlock::Unknown
    {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    Err(format!(
        "this kernel charges BPF memory to RLIMIT_MEMLOCK (kernels before 5.11), whose hard limit here is {} KiB, and raising it failed ({err}): grant CAP_SYS_RESOURCE{}, or raise the limit first (`ulimit -l unlimited`; LimitMEMLOCK=infinity in a systemd unit)",
        access.memlock_hard.map_or(0, |b| b / 1024),
        if access.has(CAP_SYS_RESOURCE) {
            " (it is granted, yet the kernel refused)"
        } else {
            ""
        }
    ))
}
