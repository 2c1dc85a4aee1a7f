//! The I/O shapes the bench runs, and the peers it runs them under: what a database, a
//! logger, a package manager and a bulk writer do to a disk, each measured under iotop-bpf
//! and under the leanest tools that answer part of the same question.

use std::path::Path;

/// One I/O shape, run by fio on the RAM-backed loop device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// 4 KiB random reads, io_uring, queue depth 32.
    Uring,
    /// 4 KiB random reads, 4 threads of pread (a thread in D for every read): a database.
    Psync,
    /// 4 KiB random direct writes, libaio, 2 jobs (the seed's
    /// `fio -rw=randwrite -bs=4k -direct=1 -numjobs=2 -ioengine=libaio`).
    LibaioWrite,
    /// 64 KiB buffered sequential writes, written back by the kernel's flusher.
    Buffered,
    /// 128-byte writes, each followed by fsync: lab001's logger.
    FsyncLogger,
    /// lab001's logger in 4 threads: syncs open and close on every CPU at once, as a
    /// database's committing backends do (the table of open syncs is written across CPUs).
    FsyncThreads,
}

/// What "one I/O" is when BPF time is divided by I/Os.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PerIo {
    /// A request the disk completed (/sys/block/X/stat): direct I/O maps one to one.
    Request,
    /// A system call of fio's (write + fsync for the logger): buffered writes reach the disk
    /// merged, so requests would hide what each call costs.
    Call,
}

pub const ALL: [Workload; 6] = [
    Workload::Uring,
    Workload::Psync,
    Workload::LibaioWrite,
    Workload::Buffered,
    Workload::FsyncLogger,
    Workload::FsyncThreads,
];

impl Workload {
    /// Its name for `bench --only`.
    pub fn short(self) -> &'static str {
        match self {
            Self::Uring => "uring",
            Self::Psync => "psync",
            Self::LibaioWrite => "libaio",
            Self::Buffered => "buffered",
            Self::FsyncLogger => "lab001",
            Self::FsyncThreads => "fsync4",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Uring => "4k randread io_uring QD32",
            Self::Psync => "4k randread psync, 4 threads",
            Self::LibaioWrite => "4k randwrite libaio direct, 2 jobs",
            Self::Buffered => "64k buffered write-back",
            Self::FsyncLogger => "128 B write + fsync (lab001)",
            Self::FsyncThreads => "128 B write + fsync, 4 threads",
        }
    }

    pub fn fio_args(self) -> &'static [&'static str] {
        match self {
            Self::Uring => &[
                "--rw=randread",
                "--bs=4k",
                "--direct=1",
                "--ioengine=io_uring",
                "--iodepth=32",
            ],
            Self::Psync => &[
                "--rw=randread",
                "--bs=4k",
                "--direct=1",
                "--ioengine=psync",
                "--numjobs=4",
                "--group_reporting",
            ],
            Self::LibaioWrite => &[
                "--rw=randwrite",
                "--bs=4k",
                "--direct=1",
                "--ioengine=libaio",
                "--iodepth=16",
                "--numjobs=2",
                "--group_reporting",
            ],
            Self::Buffered => &["--rw=write", "--bs=64k", "--direct=0", "--ioengine=psync"],
            Self::FsyncLogger => &[
                "--rw=write",
                "--bs=128",
                "--direct=0",
                "--ioengine=psync",
                "--fsync=1",
            ],
            Self::FsyncThreads => &[
                "--rw=write",
                "--bs=128",
                "--direct=0",
                "--ioengine=psync",
                "--fsync=1",
                "--numjobs=4",
                "--group_reporting",
            ],
        }
    }

    pub fn writes(self) -> bool {
        !matches!(self, Self::Uring | Self::Psync)
    }

    pub fn per_io(self) -> PerIo {
        match self {
            Self::Buffered | Self::FsyncLogger | Self::FsyncThreads => PerIo::Call,
            _ => PerIo::Request,
        }
    }

    /// fio's calls per I/O it counts (the logger's fsync is a call of its own).
    pub fn calls_per_fio_io(self) -> u64 {
        if matches!(self, Self::FsyncLogger | Self::FsyncThreads) {
            2
        } else {
            1
        }
    }

    /// The bounds on the tool's BPF time per I/O: each a peer's (or the best peer's) time
    /// times a factor; all must hold.
    pub fn bpf_bounds(self) -> &'static [(PeerRef, f64)] {
        match self {
            Self::Uring => &[(PeerRef::One(Peer::Biolatency), 1.0)],
            Self::Psync => &[
                (PeerRef::One(Peer::Bpftrace), 1.0),
                (PeerRef::One(Peer::Biolatency), 1.15),
            ],
            Self::LibaioWrite => &[(PeerRef::Best, 1.2)],
            Self::FsyncLogger => &[(PeerRef::One(Peer::Bpftrace), 2.0)],
            // The peers trace no write call: no bound, shown for context. The 4 threads'
            // figure is context for lab001's bound.
            Self::Buffered | Self::FsyncThreads => &[],
        }
    }

    /// The IOPS the tool must keep, with statistics off: at least biolatency's less this.
    pub fn iops_kept_margin(self) -> Option<f64> {
        matches!(self, Self::Uring | Self::Psync).then_some(0.02)
    }

    /// Programs run per I/O the tool must stay under.
    pub fn runs_per_io_target(self) -> Option<f64> {
        match self {
            Self::Psync => Some(5.5),
            Self::Uring => Some(4.5),
            _ => None,
        }
    }

    /// The IOPS ratio the budget line is worked out for (context: what a tracer may add per
    /// I/O on this machine to keep it).
    pub fn budget_ratio(self) -> Option<f64> {
        matches!(self, Self::Uring | Self::Psync).then_some(0.95)
    }
}

/// Whose time a bound is a multiple of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerRef {
    /// The peer with the least BPF time on the shape.
    Best,
    One(Peer),
}

/// A peer: the leanest tools that answer part of iotop-bpf's question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A bpftrace script keeping one latency histogram.
    Bpftrace,
    /// libbpf-tools' biolatency (CO-RE, Debian's `libbpf-tools`).
    Biolatency,
    /// libbpf-tools' biotop: per-process I/O, the closest to iotop-bpf's process pane.
    Biotop,
}

pub const PEERS: [Peer; 3] = [Peer::Bpftrace, Peer::Biolatency, Peer::Biotop];

pub const BPFTRACE_HIST: &str =
    "tracepoint:block:block_rq_issue { @start[args->dev, args->sector] = nsecs; }
tracepoint:block:block_rq_complete /@start[args->dev, args->sector]/ {
  @usecs = hist((nsecs - @start[args->dev, args->sector]) / 1000);
  delete(@start[args->dev, args->sector]); }";

impl Peer {
    pub fn name(self) -> &'static str {
        match self {
            Self::Bpftrace => "bpftrace histogram",
            Self::Biolatency => "biolatency (libbpf-tools)",
            Self::Biotop => "biotop (libbpf-tools)",
        }
    }

    /// Its short name, in a target's text.
    pub fn program_name(self) -> &'static str {
        match self {
            Self::Bpftrace => "bpftrace",
            Self::Biolatency => "biolatency",
            Self::Biotop => "biotop",
        }
    }

    pub fn program(self) -> &'static str {
        match self {
            Self::Bpftrace => "bpftrace",
            Self::Biolatency => "/usr/sbin/biolatency",
            Self::Biotop => "/usr/sbin/biotop",
        }
    }

    /// Its arguments: running until stopped, printing as little as it can.
    pub fn args(self) -> Vec<&'static str> {
        match self {
            Self::Bpftrace => vec!["-e", BPFTRACE_HIST],
            // One histogram at the end (interval of a day).
            Self::Biolatency => vec!["86400"],
            // Its top-N screen each second, without clearing the terminal.
            Self::Biotop => vec!["-C", "1"],
        }
    }

    pub fn installed(self) -> bool {
        match self {
            Self::Bpftrace => crate::util::find_in_path("bpftrace").is_some(),
            _ => Path::new(self.program()).is_file(),
        }
    }
}
