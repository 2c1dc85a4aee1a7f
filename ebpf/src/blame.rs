//! Who to blame for a request, read when it completes (raw tracepoints only): the cgroup it
//! was issued for, and for write-back by a flusher, the process that dirtied its pages.
//!
//! The dirtier: `writeback_dirty_folio` fires in the dirtying task, once per folio going
//! from clean to dirty, and records the task against the file's `address_space`. When a
//! flusher's write request completes, its first page leads to the same `address_space`
//! (`rq->bio->bi_io_vec[0].bv_page`, its folio's head page's `mapping`). Per file, not per page: a
//! file dirtied by two processes is charged to the last one.
//!
//! The file of a readahead read: the same first page's `mapping->host`, its inode number and
//! its superblock's device, so that user space can set a process's device reads of a file
//! against what it asked of that file.

use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::{map, raw_tracepoint},
    maps::{LruHashMap, PerCpuArray},
    programs::RawTracePointContext,
};
use iotop_bpf_common::{
    COMM_LEN,
    blame::{BlameOffsets, Dirtier, PAGE_MAPPING_FLAGS},
};

use crate::file::read;

/// Set by the loader; all zero (off) under `lockdown=confidentiality`. A plain static: see
/// [`on`].
#[unsafe(no_mangle)]
static BLAME_OFFSETS: BlameOffsets = BlameOffsets::OFF;

/// A copy of [`BLAME_OFFSETS`] as the loader set it.
#[inline(always)]
fn offsets() -> BlameOffsets {
    // SAFETY: a read of a static.
    unsafe { core::ptr::read_volatile(&raw const BLAME_OFFSETS) }
}

/// Whether any blame is read. Each flag is read on its own from the frozen `.rodata`, so
/// that the verifier knows the value: where it is off, the verifier never walks the
/// `bpf_probe_read_kernel` calls behind it, and a kernel that refuses the helper (lockdown)
/// still loads the completion probe.
#[inline(always)]
pub fn on() -> bool {
    // SAFETY: reads of a static's fields.
    unsafe {
        core::ptr::read_volatile(&raw const BLAME_OFFSETS.cgroup) != 0
            || core::ptr::read_volatile(&raw const BLAME_OFFSETS.writeback) != 0
            || core::ptr::read_volatile(&raw const BLAME_OFFSETS.readahead) != 0
    }
}

/// The offset of `request.bio`, as a field read on its own (a direct load's offset must be
/// a constant the verifier knows).
#[inline(always)]
pub fn rq_bio() -> u32 {
    // SAFETY: a read of a static's field.
    unsafe { core::ptr::read_volatile(&raw const BLAME_OFFSETS.rq_bio) }
}

/// `struct address_space *` -> who last dirtied a page of it. LRU: there is no event when an
/// inode leaves the cache.
#[map]
static DIRTIERS: LruHashMap<u64, Dirtier> = LruHashMap::with_max_entries(16_384, 0);

/// What this CPU last put in [`DIRTIERS`]: a writer dirties folio after folio of one file,
/// and each would otherwise cost a hash update.
#[repr(C)]
#[derive(Clone, Copy)]
struct LastDirtied {
    mapping: u64,
    tgid: u32,
    /// Folios skipped since the last update: refreshed now and then, so an entry the LRU
    /// dropped comes back.
    skipped: u32,
}

#[map]
static LAST_DIRTIED: PerCpuArray<LastDirtied> = PerCpuArray::with_max_entries(1, 0);

/// Skipped folios between two refreshes of a writer's entry.
const REFRESH_EVERY: u32 = 256;

/// `writeback_dirty_folio(struct folio *folio, struct address_space *mapping)`.
#[raw_tracepoint(tracepoint = "writeback_dirty_folio")]
pub fn blame_dirty_folio(ctx: RawTracePointContext) -> i32 {
    let mapping: u64 = ctx.arg(1);
    if mapping == 0 {
        return 0;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let Some(last) = LAST_DIRTIED.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's slot.
    unsafe {
        if (*last).mapping == mapping && (*last).tgid == tgid && (*last).skipped < REFRESH_EVERY {
            (*last).skipped += 1;
            return 0;
        }
        *last = LastDirtied {
            mapping,
            tgid,
            skipped: 0,
        };
    }
    let dirtier = Dirtier {
        tgid,
        _pad: 0,
        comm: bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
    };
    let _ = DIRTIERS.insert(&mapping, &dirtier, u64::from(BPF_ANY));
    0
}

/// A cgroup per `blkcg_gq`, cached per CPU (a request's blkg is read in two steps, its
/// cgroup in four more).
#[repr(C)]
#[derive(Clone, Copy)]
struct CachedCgroup {
    blkg: u64,
    id: u64,
}

const CGROUP_CACHE_SLOTS: u32 = 64;

#[map]
static CGROUP_CACHE: PerCpuArray<CachedCgroup> =
    PerCpuArray::with_max_entries(CGROUP_CACHE_SLOTS, 0);

/// What a completing request is blamed on.
pub struct Blame {
    pub cgroup_id: u64,
    pub dirtier: Option<Dirtier>,
}

impl Blame {
    pub const NONE: Self = Self {
        cgroup_id: 0,
        dirtier: None,
    };
}

/// The file of the readahead read this CPU completes: its filesystem's `dev_t` and inode
/// number (zero when its pages have none). Kept in a map, not carried on the stack to the
/// record: a value that differs between the readahead path and the others would make the
/// verifier walk the rest of the completion probe twice (5.10's refused it, past its million
/// instructions).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ReadaheadFile {
    pub dev: u32,
    pub _pad: u32,
    pub ino: u64,
}

#[map]
static READAHEAD_FILE: PerCpuArray<ReadaheadFile> = PerCpuArray::with_max_entries(1, 0);

/// Notes the file whose pages a readahead read reads, its `bio` read by the caller's way.
/// Only readahead reads come here: direct I/O never reads ahead, so its requests never pay
/// it.
#[inline(always)]
pub fn note_readahead(bio: &impl Fn() -> u64) {
    let o = offsets();
    let Some(slot) = READAHEAD_FILE.get_ptr_mut(0) else {
        return;
    };
    let (dev, ino) = if o.readahead == 0 {
        (0, 0)
    } else {
        Some(bio())
            .filter(|&bio| bio != 0)
            .and_then(|bio| file(bio, &o))
            .unwrap_or((0, 0))
    };
    // SAFETY: this CPU's slot.
    unsafe {
        (*slot).dev = dev;
        (*slot).ino = ino;
    }
}

/// The file [`note_readahead`] noted on this CPU.
#[inline(always)]
pub fn readahead_file() -> Option<ReadaheadFile> {
    // SAFETY: copied out of this CPU's slot.
    READAHEAD_FILE.get_ptr(0).map(|f| unsafe { *f })
}

/// `rq->bio` for the raw completion probe, from `head` (the request's first 64 bytes) when
/// it sits there (on the kernels seen so far: one read less per request); 0 when unknown.
#[inline(always)]
pub fn bio_in(rq: u64, head: &[u64; 8]) -> u64 {
    let at = rq_bio();
    if at < 64 && at % 8 == 0 {
        head[(at / 8) as usize & 7]
    } else {
        read::<u64>(rq, at).unwrap_or(0)
    }
}

/// The blame of a request, its `bio` read by the caller's way; `by_flusher`: it was created
/// by a flusher (a kworker) and writes, so its pages' dirtier is looked up.
#[inline(always)]
pub fn of(bio: &impl Fn() -> u64, by_flusher: bool) -> Blame {
    let o = offsets();
    if o.cgroup == 0 && o.writeback == 0 {
        return Blame::NONE;
    }
    let bio = bio();
    if bio == 0 {
        return Blame::NONE;
    }
    Blame {
        cgroup_id: if o.cgroup != 0 { cgroup(bio, &o) } else { 0 },
        dirtier: if by_flusher && o.writeback != 0 {
            dirtier(bio, &o)
        } else {
            None
        },
    }
}

#[inline(always)]
fn cgroup(bio: u64, o: &BlameOffsets) -> u64 {
    let Ok(blkg) = read::<u64>(bio, o.bio_blkg) else {
        return 0;
    };
    if blkg == 0 {
        return 0;
    }
    // blkgs are a few hundred bytes apart: drop the low bits before indexing.
    let slot = CGROUP_CACHE.get_ptr_mut(((blkg >> 8) as u32) & (CGROUP_CACHE_SLOTS - 1));
    if let Some(slot) = slot
        // SAFETY: this CPU's slot.
        && unsafe { (*slot).blkg } == blkg
    {
        return unsafe { (*slot).id };
    }
    let id = read::<u64>(blkg, o.blkg_blkcg)
        .and_then(|blkcg| read::<u64>(blkcg, o.blkcg_cgroup))
        .and_then(|cgroup| read::<u64>(cgroup, o.cgroup_kn))
        .and_then(|kn| read::<u64>(kn, o.kn_id))
        .unwrap_or(0);
    if let Some(slot) = slot {
        // SAFETY: as above.
        unsafe { *slot = CachedCgroup { blkg, id } };
    }
    id
}

/// The `address_space` of the bio's first page, if it is a file's.
#[inline(always)]
fn mapping(bio: u64, o: &BlameOffsets) -> Option<u64> {
    let vec = read::<u64>(bio, o.bio_io_vec).ok()?;
    let page = read::<u64>(vec, o.bvec_page).ok()?;
    // A tail page of a large folio has bit 0 set: the rest is its head's address, or the
    // mask that takes a tail's address to its head's (GENMASK(63, shift) | 1).
    let info = read::<u64>(page, o.page_compound_head).ok()?;
    let head = if info & 1 == 0 {
        page
    } else if o.page_head_mask != 0 {
        page & info
    } else {
        info - 1
    };
    let mapping = read::<u64>(head, o.page_mapping).ok()?;
    if mapping == 0 || mapping & PAGE_MAPPING_FLAGS != 0 {
        return None; // anonymous memory, or not a file's page
    }
    Some(mapping)
}

#[inline(always)]
fn dirtier(bio: u64, o: &BlameOffsets) -> Option<Dirtier> {
    let mapping = mapping(bio, o)?;
    // SAFETY: copied out at once.
    DIRTIERS.get_ptr(&mapping).map(|d| unsafe { *d })
}

/// The filesystem device and inode number of the file whose pages the bio reads.
#[inline(always)]
fn file(bio: u64, o: &BlameOffsets) -> Option<(u32, u64)> {
    let host = read::<u64>(mapping(bio, o)?, o.mapping_host).ok()?;
    let ino = read::<u64>(host, o.inode_ino).ok()?;
    let sb = read::<u64>(host, o.inode_sb).ok()?;
    Some((read::<u32>(sb, o.sb_dev).ok()?, ino))
}
