//! Who to blame for a request: the cgroup it was issued for and, for write-back, the process
//! that dirtied the pages. Read in the completion probe through kernel objects, at offsets
//! user space finds in BTF (raw tracepoints only).

use crate::COMM_LEN;

/// Offsets from BTF; `cgroup` / `writeback` are 0 when this kernel lacks a member the chain
/// needs (then that blame is off, and `check` says why).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct BlameOffsets {
    /// 1 when the cgroup chain below is known.
    pub cgroup: u32,
    /// 1 when the page chain below is known.
    pub writeback: u32,
    /// 1 when the page chain and the file chain (`mapping` to its inode's number and
    /// filesystem) are known: readahead reads name their file.
    pub readahead: u32,
    /// `request.bio`.
    pub rq_bio: u32,
    /// `bio.bi_blkg`, `blkcg_gq.blkcg`, `blkcg.css` + `cgroup_subsys_state.cgroup`,
    /// `cgroup.kn`, `kernfs_node.id`.
    pub bio_blkg: u32,
    pub blkg_blkcg: u32,
    pub blkcg_cgroup: u32,
    pub cgroup_kn: u32,
    pub kn_id: u32,
    /// `bio.bi_io_vec`, `bio_vec.bv_page`, `page.compound_head` (`compound_info` from 7.0;
    /// bit 0 set on a tail page: the rest points at the head, or is the mask that takes a
    /// tail's address to its head's where `page_head_mask` is 1) and `page.mapping` (the
    /// head's: its folio's).
    pub bio_io_vec: u32,
    pub bvec_page: u32,
    pub page_compound_head: u32,
    pub page_mapping: u32,
    pub page_head_mask: u32,
    /// `address_space.host`, `inode.i_ino`, `inode.i_sb`, `super_block.s_dev`.
    pub mapping_host: u32,
    pub inode_ino: u32,
    pub inode_sb: u32,
    pub sb_dev: u32,
}

impl BlameOffsets {
    pub const OFF: Self = Self {
        cgroup: 0,
        writeback: 0,
        readahead: 0,
        rq_bio: 0,
        bio_blkg: 0,
        blkg_blkcg: 0,
        blkcg_cgroup: 0,
        cgroup_kn: 0,
        kn_id: 0,
        bio_io_vec: 0,
        bvec_page: 0,
        page_compound_head: 0,
        page_mapping: 0,
        page_head_mask: 0,
        mapping_host: 0,
        inode_ino: 0,
        inode_sb: 0,
        sb_dev: 0,
    };
}

pub const GLOBAL_BLAME_OFFSETS: &str = "BLAME_OFFSETS";

/// Hash: `struct address_space *` -> the process that last dirtied one of its pages.
pub const DIRTIERS: &str = "DIRTIERS";

/// Who dirtied a file's pages last.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct Dirtier {
    pub tgid: u32,
    pub _pad: u32,
    pub comm: [u8; COMM_LEN],
}

/// `address_space` bits: the low bit set marks an anonymous mapping (not a file's pages).
pub const PAGE_MAPPING_FLAGS: u64 = 0x3;
