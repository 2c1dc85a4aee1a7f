//! `write_amplification`: small writes, each followed by a sync (Brendan Gregg's lab001).
//!
//! Every sync has to write at least one whole filesystem block for the few bytes that
//! changed, and on a journaling filesystem a commit (descriptor, metadata, commit block and a
//! cache flush) on top. 128-byte records, each followed by fsync, on ext4 write ~16 KiB per
//! record: over 100x.

use super::{Evidence, Finding, FindingKind, Severity, per_second};
use crate::model::{ProcRow, Snapshot};

/// Fewer syncs than this per second is not a cadence worth naming.
pub const MIN_SYNCS_PER_S: f64 = 5.0;
/// Payload per sync below a filesystem block: the sync writes more than was asked.
pub const MAX_PAYLOAD_PER_SYNC: u64 = 4096;
/// Device bytes per logical byte, own writes in the sync plus journal writes charged to it.
pub const MIN_AMPLIFICATION: f64 = 4.0;
/// From here on it is critical.
pub const CRITICAL_AMPLIFICATION: f64 = 32.0;

#[expect(
    clippy::cast_precision_loss,
    reason = "ratios of byte counts for display"
)]
pub fn check(snap: &Snapshot, proc: &ProcRow) -> Option<Finding> {
    let s = &proc.interval.sync;
    let syncs_per_s = per_second(snap, s.syncs);
    if s.syncs == 0 || syncs_per_s < MIN_SYNCS_PER_S || s.window_bytes == 0 {
        return None;
    }
    let payload_per_sync = s.window_bytes / s.syncs;
    if payload_per_sync >= MAX_PAYLOAD_PER_SYNC {
        return None;
    }
    let own = s.in_sync_write_bytes;
    let charged = s.charged_write_bytes;
    let ratio = (own + charged) as f64 / s.window_bytes as f64;
    if ratio < MIN_AMPLIFICATION {
        return None;
    }
    let data_ratio = own as f64 / s.window_bytes as f64;
    let avg_write = s.window_bytes / s.window_writes.max(1);
    let own_per_sync = own / s.syncs;
    let charged_per_sync = charged / s.syncs;
    let journal = s
        .charged_from
        .first()
        .map_or_else(|| "the journal".to_string(), |p| p.comm.clone());
    let kind = proc.recent_syncs.first().map_or("sync", |c| c.kind);
    let dev = proc
        .devices
        .iter()
        .max_by_key(|d| d.write_bytes)
        .map(|d| d.dev);
    Some(Finding {
        kind: FindingKind::WriteAmplification,
        severity: if ratio >= CRITICAL_AMPLIFICATION {
            Severity::Critical
        } else {
            Severity::Warning
        },
        tgid: Some(proc.tgid),
        comm: proc.comm.clone(),
        dev,
        file: proc.recent_syncs.first().map(|c| c.file.clone()),
        summary: format!(
            "{} (pid {}): {avg_write}-byte writes, each followed by {kind}: {ratio:.0}x write amplification \
             ({own_per_sync} B own + {charged_per_sync} B by {journal} per {payload_per_sync} B synced)",
            proc.comm, proc.tgid
        ),
        evidence: vec![
            ("avg_write_bytes", Evidence::Count(avg_write)),
            ("logical_bytes_per_sync", Evidence::Count(payload_per_sync)),
            ("device_bytes_per_sync_own", Evidence::Count(own_per_sync)),
            (
                "device_bytes_per_sync_charged",
                Evidence::Count(charged_per_sync),
            ),
            (
                "syncs_per_s",
                Evidence::Ratio((syncs_per_s * 10.0).round() / 10.0),
            ),
            (
                "amplification",
                Evidence::Ratio((ratio * 10.0).round() / 10.0),
            ),
            (
                "data_amplification",
                Evidence::Ratio((data_ratio * 10.0).round() / 10.0),
            ),
            ("sync_kind", Evidence::Text(kind.to_string())),
            ("charged_to_journal_thread", Evidence::Text(journal)),
        ],
        why:
            "each sync writes at least one whole filesystem block for the few bytes that changed, \
              plus a journal commit and a cache flush"
                .to_string(),
        fix:
            "batch records and sync less often (group commit), write whole blocks, or preallocate \
              the file and use fdatasync"
                .to_string(),
        active: true,
        first_seen_ns: snap.now_ns,
        last_seen_ns: snap.now_ns,
    })
}
