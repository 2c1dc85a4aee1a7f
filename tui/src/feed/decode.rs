//! Ring-buffer records to model inputs. A short or unknown record is an error the caller
//! counts (as [`Input::BadRecords`]) and skips; it never stops the pipeline.

use iotop_bpf_common::{
    RECORD_BLOCK_IO, RECORD_DIO, RECORD_DSTATE, RECORD_EXIT, RECORD_SYNC_CALL, RecordHeader,
    block::BlockIoRecord,
    dio::{DioRecord, IOMAP_DIO_OVERWRITE_ONLY, KI_WRITE},
    dstate::DStateRecord,
    process::ExitRecord,
    sync::SyncCallRecord,
};
use thiserror::Error;

use crate::model::{
    BlockIo, Comm, DStateEpisode, Dev, DioCall, Dirtier, FileKey, FileRef, Input, Op, ProcessExit,
    SyncCall, SyncKind, WakeupStack,
};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than a header")]
    Short(usize),
    #[error("record kind {kind} claims {claimed} bytes but has {actual}")]
    BadSize {
        kind: u16,
        claimed: u16,
        actual: usize,
    },
    #[error("unknown record kind {0}")]
    UnknownKind(u16),
    #[error("unknown sync call kind {0}")]
    UnknownSyncKind(u8),
}

/// One ring-buffer record as a model input (never a sample or a bad-record count).
pub fn decode(bytes: &[u8]) -> Result<Input, DecodeError> {
    let header_len = size_of::<RecordHeader>();
    let header: RecordHeader = bytes
        .get(..header_len)
        .map(bytemuck::pod_read_unaligned)
        .ok_or(DecodeError::Short(bytes.len()))?;
    match header.kind {
        RECORD_BLOCK_IO => {
            let raw: BlockIoRecord = read_exact(&header, bytes)?;
            Ok(Input::Block(block_io(&raw)))
        }
        RECORD_SYNC_CALL => {
            let raw: SyncCallRecord = read_exact(&header, bytes)?;
            Ok(Input::Sync(sync_call(&raw)?))
        }
        RECORD_DSTATE => {
            let raw: DStateRecord = read_exact(&header, bytes)?;
            let e = raw.episode;
            Ok(Input::DState(DStateEpisode {
                tid: e.pid,
                tgid: e.tgid(),
                comm: Comm::from_bytes(e.comm),
                start_ns: e.start_ns,
                end_ns: raw.end_ns,
                stack_id: e.stack_id,
                wakeup_stack: wakeup_stack(&raw),
                stack: Vec::new(),
                no_stack: None,
            }))
        }
        RECORD_DIO => {
            let raw: DioRecord = read_exact(&header, bytes)?;
            let dev = Dev::from_kernel(raw.dev);
            Ok(Input::Dio(DioCall {
                tgid: raw.tgid,
                tid: raw.pid,
                comm: Comm::from_bytes(raw.comm),
                ts_ns: raw.ts_ns,
                fs_dev: dev,
                disk: dev,
                ino: raw.ino,
                isize: u64::try_from(raw.isize).unwrap_or(0),
                pos: u64::try_from(raw.pos).unwrap_or(0),
                count: raw.count,
                write: raw.ki_flags & KI_WRITE != 0,
                overwrite_only: raw.dio_flags & IOMAP_DIO_OVERWRITE_ONLY != 0,
                fs_block_size: 0,
                logical_block_size: 0,
                physical_block_size: 0,
                fs_start_sector: 0,
                file: None,
                name: joined_name(&raw.parent, &raw.name),
            }))
        }
        RECORD_EXIT => {
            let raw: ExitRecord = read_exact(&header, bytes)?;
            Ok(Input::Exit(ProcessExit {
                tgid: raw.tgid,
                ts_ns: raw.ts_ns,
            }))
        }
        kind => Err(DecodeError::UnknownKind(kind)),
    }
}

/// The stack the wakeup program took, as many frames as the kernel filled.
fn wakeup_stack(raw: &DStateRecord) -> WakeupStack {
    match usize::try_from(raw.stack_bytes) {
        Ok(0) => WakeupStack::None,
        Ok(bytes) => WakeupStack::Taken(
            raw.ips
                .iter()
                .take(bytes / 8)
                .copied()
                .take_while(|&ip| ip != 0)
                .collect(),
        ),
        Err(_) => WakeupStack::Failed(raw.stack_bytes),
    }
}

/// Checks that the header's size and the record's length both match `T`.
fn read_exact<T: bytemuck::Pod>(header: &RecordHeader, bytes: &[u8]) -> Result<T, DecodeError> {
    let want = size_of::<T>();
    if usize::from(header.size) != want || bytes.len() < want {
        return Err(DecodeError::BadSize {
            kind: header.kind,
            claimed: header.size,
            actual: bytes.len(),
        });
    }
    Ok(bytemuck::pod_read_unaligned(&bytes[..want]))
}

fn block_io(raw: &BlockIoRecord) -> BlockIo {
    BlockIo {
        dev: Dev::from_kernel(raw.dev),
        sector: raw.sector,
        bytes: raw.bytes,
        op: Op::from_code(raw.op),
        flags: raw.flags | iotop_bpf_common::rwbs::parse(&raw.rwbs).1,
        tgid: raw.tgid,
        tid: raw.pid,
        comm: Comm::from_bytes(raw.comm),
        created_ns: raw.created_ns,
        issued_ns: raw.issued_ns,
        completed_ns: raw.completed_ns,
        error: raw.error,
        kernel_thread: false,
        cgroup: raw.cgroup_id,
        dirtier: (raw.dirtier_tgid != 0).then(|| Dirtier {
            tgid: raw.dirtier_tgid,
            comm: Comm::from_bytes(raw.dirtier_comm),
        }),
        file: (raw.file_ino != 0 && raw.file_dev != 0).then(|| FileKey {
            fs_dev: Dev::from_kernel(raw.file_dev),
            ino: raw.file_ino,
        }),
    }
}

fn sync_call(raw: &SyncCallRecord) -> Result<SyncCall, DecodeError> {
    let kind = SyncKind::from_code(raw.kind).ok_or(DecodeError::UnknownSyncKind(raw.kind))?;
    let fd = (raw.fd >= 0).then_some(raw.fd);
    Ok(SyncCall {
        tgid: raw.tgid,
        tid: raw.pid,
        comm: Comm::from_bytes(raw.comm),
        kind,
        fd,
        start_ns: raw.start_ns,
        end_ns: raw.end_ns,
        ret: raw.ret,
        window_bytes: raw.window_bytes,
        window_writes: raw.window_writes,
        addr: if kind == SyncKind::Msync { raw.addr } else { 0 },
        // An io_uring sync, or a synced write whose fd is unknown, still names its file.
        file: if fd.is_some() || (raw.ino != 0 && raw.fs_dev != 0) {
            FileRef::Unresolved("not looked up".to_string())
        } else {
            FileRef::NoFile
        },
        dev: None,
        // A sane block size (512 B to 16 MiB), or unknown.
        fs_block_size: if (9..=24).contains(&raw.blkbits) {
            1 << raw.blkbits
        } else {
            0
        },
        fs_dev: (raw.fs_dev != 0).then(|| Dev::from_kernel(raw.fs_dev)),
        ino: raw.ino,
        name: joined_name(&raw.parent, &raw.name),
        dir: raw.file_type == iotop_bpf_common::sync::FILE_TYPE_DIR,
    })
}

/// `parent/name` from a record's two name fields (the name alone at the root, or when the
/// directory is unknown; "/" is the root's own name).
fn joined_name(parent: &[u8], name: &[u8]) -> String {
    let (parent, name) = (Comm::text(parent), Comm::text(name));
    if parent.is_empty() || parent == "/" || name.is_empty() {
        name
    } else {
        format!("{parent}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use iotop_bpf_common::block::{OP_WRITE, ORIGIN_START};

    use super::*;

    fn sample() -> BlockIoRecord {
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"fio\0");
        BlockIoRecord {
            header: RecordHeader {
                kind: RECORD_BLOCK_IO,
                size: size_of::<BlockIoRecord>() as u16,
                _reserved: 0,
            },
            created_ns: 100,
            issued_ns: 150,
            completed_ns: 400,
            sector: 2048,
            dev: (7 << 20) | 3,
            bytes: 4096,
            tgid: 42,
            pid: 43,
            error: 0,
            op: OP_WRITE,
            flags: 0,
            origin: ORIGIN_START,
            _pad: 0,
            rwbs: *b"WS\0\0\0\0\0\0",
            comm,
            cgroup_id: 0,
            dirtier_tgid: 0,
            file_dev: 0,
            dirtier_comm: [0; 16],
            file_ino: 0,
        }
    }

    #[test]
    fn decodes_a_block_record() {
        let raw = sample();
        let Ok(Input::Block(io)) = decode(bytemuck::bytes_of(&raw)) else {
            panic!("not a block record")
        };
        assert_eq!(io.dev, Dev::new(7, 3));
        assert_eq!((io.tgid, io.tid, io.bytes), (42, 43, 4096));
        assert_eq!(io.op, Op::Write);
        assert!(io.is_sync());
        assert_eq!(io.comm.to_string(), "fio");
        assert_eq!(
            (io.queue_ns(), io.device_ns(), io.latency_ns()),
            (50, 250, 300)
        );
        assert_eq!((io.cgroup, io.dirtier), (0, None));
        let mut written_back = raw;
        written_back.cgroup_id = 9001;
        written_back.dirtier_tgid = 77;
        written_back.dirtier_comm[..2].copy_from_slice(b"dd");
        let Ok(Input::Block(io)) = decode(bytemuck::bytes_of(&written_back)) else {
            panic!("not a block record")
        };
        assert_eq!(io.cgroup, 9001);
        assert_eq!(
            io.dirtier,
            Some(Dirtier {
                tgid: 77,
                comm: Comm::new("dd")
            })
        );
        assert_eq!(io.file, None);
        let mut read_ahead = raw;
        read_ahead.op = iotop_bpf_common::block::OP_READ;
        read_ahead.file_dev = (7 << 20) | 1;
        read_ahead.file_ino = 4242;
        let Ok(Input::Block(io)) = decode(bytemuck::bytes_of(&read_ahead)) else {
            panic!("not a block record")
        };
        assert_eq!(
            io.file,
            Some(FileKey {
                fs_dev: Dev::new(7, 1),
                ino: 4242
            })
        );
    }

    #[test]
    fn decodes_a_sync_call() {
        let mut comm = [0u8; 16];
        comm[..6].copy_from_slice(b"lab001");
        let raw = SyncCallRecord {
            header: RecordHeader {
                kind: RECORD_SYNC_CALL,
                size: size_of::<SyncCallRecord>() as u16,
                _reserved: 0,
            },
            start_ns: 1_000,
            end_ns: 5_000,
            ret: 0,
            window_bytes: 128,
            window_writes: 1,
            addr: 0,
            ino: 12,
            tgid: 7,
            pid: 8,
            fd: 3,
            fs_dev: (7 << 20) | 1,
            kind: iotop_bpf_common::sync::SYNC_FDATASYNC,
            blkbits: 10,
            file_type: 0,
            _pad: [0; 5],
            comm,
            name: {
                let mut name = [0u8; 32];
                name[..7].copy_from_slice(b"wal.log");
                name
            },
            parent: {
                let mut parent = [0u8; 32];
                parent[..6].copy_from_slice(b"pg_wal");
                parent
            },
        };
        let Ok(Input::Sync(call)) = decode(bytemuck::bytes_of(&raw)) else {
            panic!("not a sync record")
        };
        assert_eq!(
            (call.kind, call.fd, call.latency_ns()),
            (SyncKind::Fdatasync, Some(3), 4_000)
        );
        assert_eq!((call.window_bytes, call.window_writes), (128, 1));
        assert_eq!(
            (call.fs_block_size, call.fs_dev, call.ino),
            (1024, Some(Dev::new(7, 1)), 12),
            "the file's identity and block size, read in the kernel"
        );
        assert_eq!(call.name, "pg_wal/wal.log", "with its directory");
        assert_eq!(joined_name(b"/", b"etc"), "etc", "at the root");
        assert_eq!(joined_name(b"", b"x"), "x");
        let mut bad = raw;
        bad.kind = 99;
        assert_eq!(
            decode(bytemuck::bytes_of(&bad)),
            Err(DecodeError::UnknownSyncKind(99))
        );
        let mut no_fd = raw;
        no_fd.fd = -1;
        no_fd.kind = iotop_bpf_common::sync::SYNC_SYNC;
        (no_fd.ino, no_fd.fs_dev) = (0, 0);
        let Ok(Input::Sync(call)) = decode(bytemuck::bytes_of(&no_fd)) else {
            panic!()
        };
        assert_eq!((call.fd, call.file), (None, FileRef::NoFile));
        // An io_uring fsync has no fd, but the kernel named its file: the feed looks it up.
        let mut uring = raw;
        uring.fd = -1;
        uring.kind = iotop_bpf_common::sync::SYNC_URING_FSYNC;
        let Ok(Input::Sync(call)) = decode(bytemuck::bytes_of(&uring)) else {
            panic!()
        };
        assert_eq!((call.kind, call.fd), (SyncKind::UringFsync, None));
        assert!(
            matches!(call.file, FileRef::Unresolved(_)),
            "{:?}",
            call.file
        );
        assert_eq!(call.kind.name(), "io_uring fsync");
        // Every kind the probes send decodes, under its own name.
        let names: std::collections::BTreeSet<&str> =
            SyncKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), iotop_bpf_common::sync::SYNC_KIND_COUNT);
        for code in 0..iotop_bpf_common::sync::SYNC_KIND_COUNT as u8 {
            assert_eq!(
                SyncKind::from_code(code),
                Some(SyncKind::ALL[code as usize]),
                "kind {code}"
            );
        }
    }

    #[test]
    fn ring_buffer_padding_after_the_record_is_accepted() {
        // The kernel rounds records up to 8 bytes; extra trailing bytes are fine.
        let mut bytes = bytemuck::bytes_of(&sample()).to_vec();
        bytes.extend_from_slice(&[0; 8]);
        assert!(decode(&bytes).is_ok());
    }

    #[test]
    fn truncated_records_are_rejected() {
        let raw = sample();
        let bytes = bytemuck::bytes_of(&raw);
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "length {len}");
        }
        assert_eq!(decode(&bytes[..3]), Err(DecodeError::Short(3)));
    }

    #[test]
    fn garbage_is_rejected_not_misread() {
        assert_eq!(decode(&[0xff; 88]), Err(DecodeError::UnknownKind(0xffff)));
        let mut lying = sample();
        lying.header.size = 64;
        assert!(matches!(
            decode(bytemuck::bytes_of(&lying)),
            Err(DecodeError::BadSize { claimed: 64, .. })
        ));
        // Deterministic pseudo-random garbage never panics.
        for bytes in crate::fuzz::garbage(0..300) {
            let _ = decode(&bytes);
        }
    }
}
