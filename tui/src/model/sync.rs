//! Per-process sync-call accounting: how often a process syncs, how long it waits, what it
//! wrote between syncs, and what the device wrote for it.

use std::collections::BTreeMap;

use super::{
    Comm, SyncCall,
    blame::Charge,
    hist::LatencyHist,
    snapshot::{Latency, Party, SyncFigures},
};

#[derive(Clone, Debug, Default)]
pub(super) struct SyncStats {
    count: u64,
    errors: u64,
    latency: LatencyHist,
    window_bytes: u64,
    window_writes: u64,
    /// Bytes of write requests the process created inside its own sync calls.
    in_sync_write_bytes: u64,
    /// Bytes kernel threads wrote for this process's syncs, by thread.
    charged_from: BTreeMap<u32, (Comm, u64)>,
    /// For kernel threads: bytes written for each process.
    on_behalf_of: BTreeMap<u32, (Comm, u64)>,
}

impl SyncStats {
    pub(super) fn add_call(&mut self, call: &SyncCall) {
        self.count += 1;
        if call.ret < 0 {
            self.errors += 1;
        }
        self.latency.record(call.latency_ns());
        self.window_bytes += call.window_bytes;
        self.window_writes += call.window_writes;
    }

    pub(super) fn add_in_sync_write(&mut self, bytes: u64) {
        self.in_sync_write_bytes += bytes;
    }

    pub(super) fn add_charge_received(&mut self, charge: &Charge) {
        let entry = self
            .charged_from
            .entry(charge.from_tgid)
            .or_insert((charge.from_comm, 0));
        entry.0 = charge.from_comm;
        entry.1 += charge.bytes;
    }

    pub(super) fn add_charge_given(&mut self, charge: &Charge) {
        let entry = self
            .on_behalf_of
            .entry(charge.to_tgid)
            .or_insert((charge.to_comm, 0));
        entry.0 = charge.to_comm;
        entry.1 += charge.bytes;
    }

    pub(super) fn merge(&mut self, other: &Self) {
        self.count += other.count;
        self.errors += other.errors;
        self.latency.merge(&other.latency);
        self.window_bytes += other.window_bytes;
        self.window_writes += other.window_writes;
        self.in_sync_write_bytes += other.in_sync_write_bytes;
        for (map, theirs) in [
            (&mut self.charged_from, &other.charged_from),
            (&mut self.on_behalf_of, &other.on_behalf_of),
        ] {
            for (tgid, (comm, bytes)) in theirs {
                let entry = map.entry(*tgid).or_insert((*comm, 0));
                entry.0 = *comm;
                entry.1 += bytes;
            }
        }
    }

    pub(super) fn figures(&self) -> SyncFigures {
        let parties = |map: &BTreeMap<u32, (Comm, u64)>| {
            let mut parties: Vec<Party> = map
                .iter()
                .map(|(&tgid, (comm, bytes))| Party {
                    tgid,
                    comm: comm.to_string(),
                    bytes: *bytes,
                })
                .collect();
            parties.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.tgid.cmp(&b.tgid)));
            parties
        };
        SyncFigures {
            syncs: self.count,
            errors: self.errors,
            latency: Latency::of(&self.latency),
            hist: self.latency.log2(),
            window_bytes: self.window_bytes,
            window_writes: self.window_writes,
            in_sync_write_bytes: self.in_sync_write_bytes,
            charged_write_bytes: self.charged_from.values().map(|(_, b)| b).sum(),
            charged_from: parties(&self.charged_from),
            on_behalf_of: parties(&self.on_behalf_of),
        }
    }
}
