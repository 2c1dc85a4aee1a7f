//! What `kernel.bpf_stats_enabled` itself adds to every program run, calibrated in the same
//! run: two programs that only return 0, a raw tracepoint and a BTF-typed one (`tp_btf`),
//! attached to `block_rq_issue` (once per request) during every pass with statistics. Their
//! run time per run is the floor each run of any tracer's program pays for being measured
//! (two clock reads around it, and on some kernels the counter update). A tracer's BPF time
//! less its runs times the floor is the time its programs' own work takes.
//!
//! Loaded with the `bpf` system call directly: two instructions each, no object file, no
//! loader library. The BTF-typed one needs the id of `btf_trace_block_rq_issue` in the
//! kernel's BTF, found by walking `/sys/kernel/btf/vmlinux`.

use std::{
    fs,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use anyhow::{Context, Result, bail};

/// The tracepoint the floor programs sit on: one run per request, in every I/O shape.
const TRACEPOINT: &str = "block_rq_issue";

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
const PROG_TYPE_TRACING: u32 = 26;
const TRACE_RAW_TP: u32 = 23;

/// `r0 = 0; exit`.
const RETURN_0: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];

/// A program's statistics so far, from its fdinfo.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Runs {
    pub ns: u64,
    pub runs: u64,
}

impl Runs {
    pub(super) fn since(self, before: Self) -> Self {
        Self {
            ns: self.ns.saturating_sub(before.ns),
            runs: self.runs.saturating_sub(before.runs),
        }
    }

    pub(super) fn add(self, other: Self) -> Self {
        Self {
            ns: self.ns + other.ns,
            runs: self.runs + other.runs,
        }
    }

    /// Nanoseconds per run (`None` before any).
    pub(super) fn per_run(self) -> Option<f64> {
        (self.runs > 0).then(|| self.ns as f64 / self.runs as f64)
    }
}

/// The floor programs, attached while this lives.
pub(super) struct Floor {
    raw: Attached,
    btf: Option<Attached>,
}

struct Attached {
    prog: OwnedFd,
    _link: OwnedFd,
}

/// What one pass of the floor programs ran: raw tracepoint and `tp_btf`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct FloorRuns {
    pub raw: Runs,
    pub btf: Runs,
}

impl FloorRuns {
    pub(super) fn add(self, other: Self) -> Self {
        Self {
            raw: self.raw.add(other.raw),
            btf: self.btf.add(other.btf),
        }
    }
}

impl Floor {
    /// Loads and attaches both; `None` (with a warning) when even the raw one cannot be:
    /// the figures are then printed without a floor.
    pub(super) fn attach() -> Option<Self> {
        let raw = match load(PROG_TYPE_RAW_TRACEPOINT, 0, 0, "floor_raw")
            .and_then(|prog| open(prog, Some(TRACEPOINT)))
        {
            Ok(raw) => raw,
            Err(err) => {
                eprintln!("warning: the floor's raw tracepoint program: {err:#}");
                return None;
            }
        };
        let btf = btf_trace_id(TRACEPOINT)
            .and_then(|id| load(PROG_TYPE_TRACING, TRACE_RAW_TP, id, "floor_btf"))
            .and_then(|prog| open(prog, None))
            .inspect_err(|err| eprintln!("warning: the floor's tp_btf program: {err:#}"))
            .ok();
        Some(Self { raw, btf })
    }

    /// Both programs' statistics so far.
    pub(super) fn runs(&self) -> FloorRuns {
        FloorRuns {
            raw: fdinfo_runs(&self.raw.prog),
            btf: self
                .btf
                .as_ref()
                .map_or_else(Runs::default, |b| fdinfo_runs(&b.prog)),
        }
    }
}

fn fdinfo_runs(fd: &OwnedFd) -> Runs {
    let info =
        fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).unwrap_or_default();
    let value = |key: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Runs {
        ns: value("run_time_ns:"),
        runs: value("run_cnt:"),
    }
}

fn bpf(cmd: libc::c_long, attr: &mut [u8]) -> Result<OwnedFd> {
    // SAFETY: `attr` is a zeroed bpf_attr of the size passed, filled for `cmd`; the pointers
    // in it outlive the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if fd < 0 {
        bail!("bpf({cmd}): {}", std::io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).context("bpf returned no fd")?;
    // SAFETY: a new descriptor the kernel gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn put(attr: &mut [u8], at: usize, bytes: &[u8]) {
    attr[at..at + bytes.len()].copy_from_slice(bytes);
}

/// `BPF_PROG_LOAD` of [`RETURN_0`] as `prog_type` (for tracing: attached as
/// `expected_attach_type` to the BTF type `attach_btf_id`).
fn load(
    prog_type: u32,
    expected_attach_type: u32,
    attach_btf_id: u32,
    name: &str,
) -> Result<OwnedFd> {
    let license = c"GPL";
    let mut attr = [0u8; 128];
    put(&mut attr, 0, &prog_type.to_ne_bytes());
    put(&mut attr, 4, &(RETURN_0.len() as u32).to_ne_bytes());
    put(&mut attr, 8, &(RETURN_0.as_ptr() as u64).to_ne_bytes());
    put(&mut attr, 16, &(license.as_ptr() as u64).to_ne_bytes());
    put(&mut attr, 48, name.as_bytes());
    put(&mut attr, 68, &expected_attach_type.to_ne_bytes());
    put(&mut attr, 108, &attach_btf_id.to_ne_bytes());
    bpf(BPF_PROG_LOAD, &mut attr).with_context(|| format!("loading {name}"))
}

/// `BPF_RAW_TRACEPOINT_OPEN`: the raw tracepoint `name`, or the one a tracing program was
/// loaded for (`None`).
fn open(prog: OwnedFd, name: Option<&str>) -> Result<Attached> {
    let name = name
        .map(std::ffi::CString::new)
        .transpose()
        .context("tracepoint name")?;
    let mut attr = [0u8; 16];
    put(
        &mut attr,
        0,
        &name.as_ref().map_or(0, |n| n.as_ptr() as u64).to_ne_bytes(),
    );
    put(&mut attr, 8, &prog.as_raw_fd().to_ne_bytes());
    let link = bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr).context("attaching")?;
    Ok(Attached { prog, _link: link })
}

/// The id of the typedef `btf_trace_<tracepoint>` in the kernel's BTF.
fn btf_trace_id(tracepoint: &str) -> Result<u32> {
    let btf = fs::read("/sys/kernel/btf/vmlinux").context("reading /sys/kernel/btf/vmlinux")?;
    typedef_id(&btf, &format!("btf_trace_{tracepoint}"))
        .with_context(|| format!("no btf_trace_{tracepoint} in the kernel's BTF"))
}

/// The id of the typedef `name` in raw BTF (`None` if absent or the BTF is malformed).
fn typedef_id(btf: &[u8], name: &str) -> Option<u32> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(btf.get(at..at + 4)?.try_into().ok()?))
    };
    if btf.get(..2)? != 0xeb9f_u16.to_ne_bytes() {
        return None;
    }
    let hdr_len = u32_at(4)? as usize;
    let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
    let str_off = u32_at(16)? as usize;
    let strings = btf.get(hdr_len + str_off..)?;
    let (mut at, end) = (hdr_len + type_off, hdr_len + type_off + type_len);
    let mut id = 1;
    while at < end {
        let (name_off, info) = (u32_at(at)? as usize, u32_at(at + 4)?);
        let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
        if kind == 8 {
            let rest = strings.get(name_off..)?;
            let len = rest.iter().position(|&b| b == 0)?;
            if &rest[..len] == name.as_bytes() {
                return Some(id);
            }
        }
        // Each kind's bytes after the 12 common ones (include/uapi/linux/btf.h).
        let extra = match kind {
            1 | 14 | 17 => 4,
            3 => 12,
            4 | 5 | 15 | 19 => 12 * vlen,
            6 | 13 => 8 * vlen,
            0 | 2 | 7..=12 | 16 | 18 => 0,
            _ => return None,
        };
        at += 12 + extra;
        id += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob of `types` (name offset, info, size-or-type, extra bytes) and `strings`.
    fn blob(types: &[(u32, u32, u32, usize)], strings: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for &(name, info, size, extra) in types {
            for v in [name, info, size] {
                body.extend_from_slice(&v.to_ne_bytes());
            }
            body.extend(std::iter::repeat_n(0u8, extra));
        }
        let mut out = Vec::new();
        out.extend_from_slice(&0xeb9f_u16.to_ne_bytes());
        out.extend_from_slice(&[1, 0]);
        for v in [
            24,
            0,
            body.len() as u32,
            body.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&u32::to_ne_bytes(v));
        }
        out.extend_from_slice(&body);
        out.extend_from_slice(strings);
        out
    }

    #[test]
    fn a_typedef_is_found_past_types_of_every_size() {
        let strings = b"\0int\0s\0btf_trace_block_rq_issue\0";
        let btf = blob(
            &[
                (1, 1 << 24, 4, 4),         // 1: int
                (5, (4 << 24) | 2, 16, 24), // 2: struct s { 2 members }
                (0, 13 << 24 | 3, 0, 24),   // 3: func_proto (3 params)
                (7, 8 << 24, 2, 0),         // 4: typedef btf_trace_block_rq_issue
            ],
            strings,
        );
        assert_eq!(typedef_id(&btf, "btf_trace_block_rq_issue"), Some(4));
        assert_eq!(typedef_id(&btf, "btf_trace_block_rq_complete"), None);
        assert_eq!(typedef_id(&btf[..10], "x"), None, "truncated");
    }
}
