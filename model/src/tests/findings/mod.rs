//! Detectors on synthetic streams: each fires on its pattern and stays silent on healthy I/O.

use crate::{
    Aggregator, BlockIo, Comm, Dev, DiskGeometry, FileRef, Input, KernelSample, Op, SampleKind,
    Settings, SyncCall, SyncKind,
    findings::{Evidence, Finding, FindingKind, INFO_MIN_STREAK, Severity},
};

mod cadence;
mod commit;
mod empty_syncs;
mod reads;
mod requests;
mod sync_storm;
mod write_amplification;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const DISK: Dev = Dev::new(7, 0);

fn evidence<'a>(f: &'a Finding, key: &str) -> &'a Evidence {
    &f.evidence
        .iter()
        .find(|(k, _)| *k == key)
        .unwrap_or_else(|| panic!("no {key} in {f:?}"))
        .1
}

/// A stream builder: a process's writes and syncs and the journal's writes, over one second.
struct Stream {
    model: Aggregator,
    logical: Vec<(u32, u64)>,
    block: u32,
}

impl Stream {
    fn new() -> Self {
        Self::on_blocks(4096)
    }

    /// On a filesystem with `block`-byte blocks.
    fn on_blocks(block: u32) -> Self {
        Self {
            model: Aggregator::new(Settings::default(), 0),
            logical: vec![],
            block,
        }
    }

    fn write_request(
        &mut self,
        tgid: u32,
        comm: &str,
        at_ns: u64,
        bytes: u32,
        in_sync: bool,
        kthread: bool,
    ) {
        self.model.ingest(&BlockIo {
            dev: DISK,
            sector: at_ns / 512,
            bytes,
            op: Op::Write,
            flags: if in_sync {
                iotop_bpf_common::block::FLAG_IN_SYNC
            } else {
                0
            },
            tgid,
            tid: tgid,
            comm: Comm::new(comm),
            created_ns: at_ns,
            issued_ns: at_ns + US,
            completed_ns: at_ns + 50 * US,
            error: 0,
            kernel_thread: kthread,
            cgroup: 0,
            dirtier: None,
            file: None,
        });
    }

    fn sync(
        &mut self,
        tgid: u32,
        kind: SyncKind,
        start_ns: u64,
        end_ns: u64,
        window_bytes: u64,
        writes: u64,
    ) {
        self.sync_file(
            tgid,
            kind,
            start_ns,
            end_ns,
            window_bytes,
            writes,
            "/mnt/test/log",
        );
    }

    #[expect(clippy::too_many_arguments, reason = "a terse test builder")]
    fn sync_file(
        &mut self,
        tgid: u32,
        kind: SyncKind,
        start_ns: u64,
        end_ns: u64,
        window_bytes: u64,
        writes: u64,
        file: &str,
    ) {
        let call = self.call_on(tgid, kind, start_ns, end_ns, file);
        self.model.ingest_sync(&SyncCall {
            window_bytes,
            window_writes: writes,
            addr: 0,
            ..call
        });
    }

    /// A directory's fsync (the names of new files made durable): no payload of its own.
    fn sync_dir(&mut self, tgid: u32, kind: SyncKind, start_ns: u64, end_ns: u64, dir: &str) {
        let call = self.call_on(tgid, kind, start_ns, end_ns, dir);
        self.model.ingest_sync(&SyncCall {
            fd: Some(4),
            dir: true,
            ..call
        });
    }

    /// A sync call of `tgid` on `file`, nothing written before it.
    fn call_on(
        &self,
        tgid: u32,
        kind: SyncKind,
        start_ns: u64,
        end_ns: u64,
        file: &str,
    ) -> SyncCall {
        SyncCall {
            tgid,
            tid: tgid,
            comm: Comm::new("lab001"),
            kind,
            fd: Some(3),
            start_ns,
            end_ns,
            ret: 0,
            window_bytes: 0,
            window_writes: 0,
            addr: 0,
            file: FileRef::Path(file.into()),
            dev: Some(DISK),
            fs_block_size: self.block,
            // As the kernel names it during the call: one inode per path.
            fs_dev: Some(DISK),
            ino: inode_of(file),
            name: String::new(),
            dir: false,
        }
    }

    fn logical(&mut self, tgid: u32, bytes: u64) {
        self.logical.push((tgid, bytes));
    }

    /// The findings of the second that ends with a final sample (everything settled).
    fn findings(mut self) -> Vec<Finding> {
        let snap = self.model.tick(&KernelSample {
            kind: SampleKind::Final,
            now_ns: 1_000 * MS,
            logical_writes: self.logical,
            names: vec![(DISK, "loop0".into())],
            page_size: 4096,
            ..KernelSample::default()
        });
        snap.findings
    }
}

/// lab001: `record`-byte appends, each followed by a sync: a block written inside the sync,
/// and 8 KiB of journal written by jbd2 while it waits. Every `big_every`-th record is 2 MiB
/// (written inside its sync too), as the workshop's lab001 ships.
fn lab001_mixed(record: u64, kind: SyncKind, count: u64, big_every: Option<u64>) -> Stream {
    let mut s = Stream::new();
    let mut logical = 0;
    for i in 0..count {
        let t = i * MS;
        let big = big_every.is_some_and(|n| i % n == n - 1);
        let (payload, own) = if big {
            (2 << 20, 2 << 20)
        } else {
            (record, 4096)
        };
        s.write_request(42, "lab001", t + 100 * US, own, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 200 * US, 8192, false, true);
        s.sync(42, kind, t + 50 * US, t + 600 * US, payload, 1);
        logical += payload;
    }
    s.logical(42, logical);
    s
}

fn lab001(record: u64, kind: SyncKind, count: u64) -> Stream {
    lab001_mixed(record, kind, count, None)
}

/// A stable, non-zero inode number for a path (FNV-1a).
fn inode_of(path: &str) -> u64 {
    path.bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
        .max(1)
}

fn of_kind(found: &[Finding], kind: FindingKind) -> Vec<&Finding> {
    found.iter().filter(|f| f.kind == kind).collect()
}

impl Stream {
    /// A cache flush: a write without data, by `tgid` (inside its sync call or not).
    fn flush_request(&mut self, tgid: u32, comm: &str, at_ns: u64, in_sync: bool, kthread: bool) {
        self.write_request(tgid, comm, at_ns, 0, in_sync, kthread);
    }

    /// Closes an interval at `now_ns` (not the last: calls settle `SETTLE_NS` after they end).
    fn tick(&mut self, now_ns: u64) -> crate::Snapshot {
        self.model.tick(&KernelSample {
            now_ns,
            names: vec![(DISK, "loop0".into())],
            page_size: 4096,
            ..KernelSample::default()
        })
    }

    /// One small record synced by `kind` at `t`: a block written inside the call, and
    /// `journal` bytes by jbd2 while it waits.
    fn synced_record(&mut self, tgid: u32, kind: SyncKind, t: u64, record: u64, journal: u32) {
        self.write_request(tgid, "app", t + 100 * US, 4096, true, false);
        if journal > 0 {
            self.write_request(300, "jbd2/loop0-8", t + 200 * US, journal, false, true);
        }
        self.sync(tgid, kind, t + 50 * US, t + 600 * US, record, 1);
    }
}
