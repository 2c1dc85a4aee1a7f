//! When the probes' switches go on and off (the decisions; [`Knobs`] does the writing):
//! direct I/O call latency (by `IOTOP_BPF_CALL_LATENCY`, and in `auto` while a cgroup I/O
//! control is configured) and the scheduler split (while a disk with a scheduler is busy).

use iotop_bpf_probe::control::Knobs;

use super::{
    io_controls,
    sysfs::{self, block_device_names},
};
use crate::{clock::monotonic_ns, model::Dev};

/// When direct I/O call latency is measured (`IOTOP_BPF_CALL_LATENCY`): it costs ~300 ns of
/// BPF time per direct I/O call on an iomap filesystem (docs/overhead.md), so by
/// default (`auto`) only while some cgroup I/O control (blk-throttle, io.max, io.latency,
/// iocost) is configured on the host, looked for every `CONTROL_SCAN_EVERY_NS` (2 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallLatencyMode {
    Auto,
    On,
    Off,
}

impl CallLatencyMode {
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "" | "auto" => Some(Self::Auto),
            "on" | "1" => Some(Self::On),
            "off" | "0" => Some(Self::Off),
            _ => None,
        }
    }

    pub fn from_env() -> Self {
        std::env::var("IOTOP_BPF_CALL_LATENCY")
            .ok()
            .and_then(|v| Self::parse(&v))
            .unwrap_or(Self::Auto)
    }

    /// What `check` prints: the mode and, for `auto`, whether it would be on now.
    pub fn describe(self) -> String {
        let set = std::env::var("IOTOP_BPF_CALL_LATENCY").unwrap_or_default();
        let unknown = if Self::parse(&set).is_none() {
            format!(" (IOTOP_BPF_CALL_LATENCY={set:?} is not auto, on or off: auto)")
        } else {
            String::new()
        };
        match self {
            Self::On => "on (IOTOP_BPF_CALL_LATENCY=on)".to_string(),
            Self::Off => "off (IOTOP_BPF_CALL_LATENCY=off)".to_string(),
            Self::Auto if io_controls::any_io_control(&io_controls::host_mounts()) => {
                format!("auto: on now, a cgroup I/O control is configured{unknown}")
            }
            Self::Auto => format!("auto: off now, no cgroup I/O control is configured{unknown}"),
        }
    }
}

/// The switch of the scheduler split (G2I / I2D): timing `block_rq_insert` costs ~70 ns per
/// I/O, and without a scheduler the kernel inserts requests too, so it is on only from the
/// first completed request of a disk that has a scheduler until an interval without one.
pub(super) struct SchedSplitSwitch {
    on: bool,
    /// The disks that have a scheduler (sysfs, read again at each sample).
    scheduled: Vec<Dev>,
    /// One of them completed a request since the last sample.
    busy: bool,
}

impl SchedSplitSwitch {
    pub(super) fn new() -> Self {
        Self {
            on: false,
            scheduled: sysfs::schedulers(&block_device_names())
                .into_iter()
                .map(|(dev, _)| dev)
                .collect(),
            busy: false,
        }
    }

    /// A request of `dev` completed: the split goes on at once (within a drain of the
    /// burst's first request) if `dev` has a scheduler.
    pub(super) fn saw_request(&mut self, dev: Dev, knobs: &mut Knobs) {
        if !self.busy && self.scheduled.contains(&dev) {
            self.busy = true;
            self.turn(true, knobs);
        }
    }

    /// At each sample: off again after an interval without a scheduled disk's request.
    pub(super) fn close_interval(&mut self, schedulers: &[(Dev, String)], knobs: &mut Knobs) {
        self.scheduled = schedulers.iter().map(|(dev, _)| *dev).collect();
        if !self.busy {
            self.turn(false, knobs);
        }
        self.busy = false;
    }

    fn turn(&mut self, on: bool, knobs: &mut Knobs) {
        if on != self.on && knobs.set_sched_split(on).is_ok() {
            self.on = on;
        }
    }
}

/// How often `auto` looks for cgroup I/O controls.
const CONTROL_SCAN_EVERY_NS: u64 = 2_000_000_000;

/// The kernel's on/off switch of call latency, turned by [`CallLatencyMode`].
pub(super) struct CallLatencySwitch {
    mode: CallLatencyMode,
    /// Both probes are attached.
    available: bool,
    pub(super) on: bool,
    /// When `auto` last looked (None: never).
    scanned_ns: Option<u64>,
    mounts: Option<io_controls::CgroupMounts>,
}

impl Default for CallLatencySwitch {
    fn default() -> Self {
        Self {
            mode: CallLatencyMode::Off,
            available: false,
            on: false,
            scanned_ns: None,
            mounts: None,
        }
    }
}

impl CallLatencySwitch {
    pub(super) fn new(mode: CallLatencyMode, available: bool, knobs: &mut Knobs) -> Self {
        let mut switch = Self {
            mode,
            available,
            ..Self::default()
        };
        switch.update(monotonic_ns(), knobs);
        switch
    }

    /// Turns the switch as the mode says; returns whether it went from on to off.
    pub(super) fn update(&mut self, now_ns: u64, knobs: &mut Knobs) -> bool {
        if !self.available {
            return false;
        }
        let want = match self.mode {
            CallLatencyMode::On => true,
            CallLatencyMode::Off => false,
            CallLatencyMode::Auto => {
                if self
                    .scanned_ns
                    .is_some_and(|at| now_ns.saturating_sub(at) < CONTROL_SCAN_EVERY_NS)
                {
                    return false;
                }
                self.scanned_ns = Some(now_ns);
                let mounts = self.mounts.get_or_insert_with(io_controls::host_mounts);
                io_controls::any_io_control(mounts)
            }
        };
        if want == self.on {
            return false;
        }
        if knobs.set_call_latency(want).is_ok() {
            self.on = want;
            return !want;
        }
        false
    }
}
