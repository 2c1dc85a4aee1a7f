//! Kernel-object offsets the raw probes read, from BTF.

use iotop_bpf_common::{
    blame::BlameOffsets, block::RawOffsets, dio::RawDioOffsets, sync::FileOffsets,
};

use super::KernelFacts;

/// Byte offset of `strukt.member`, or what is missing.
pub fn off(k: &KernelFacts, strukt: &str, member: &str) -> Result<u32, String> {
    k.offset(strukt, member)
        .ok_or_else(|| format!("no {strukt}.{member} in the kernel's BTF"))
}

fn bit(k: &KernelFacts, name: &str) -> Result<u32, String> {
    k.enum_value(name)
        .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
        .ok_or_else(|| format!("no enum value {name} in the kernel's BTF"))
}

/// What the raw block probes read of requests and disks.
pub fn request(k: &KernelFacts) -> Result<RawOffsets, String> {
    // REQ_OP_BITS is a #define; the first flag bit comes right after the operation bits.
    let op_bits = bit(k, "__REQ_FAILFAST_DEV")?;
    // Where requests point at their disk (before 5.17), q->disk is not needed.
    let q_disk = match k.offset("request", "rq_disk") {
        Some(_) => 0,
        None => off(k, "request_queue", "disk")?,
    };
    let offsets = RawOffsets {
        rq_sector: off(k, "request", "__sector")?,
        rq_data_len: off(k, "request", "__data_len")?,
        rq_cmd_flags: off(k, "request", "cmd_flags")?,
        rq_q: off(k, "request", "q")?,
        q_disk,
        disk_major: off(k, "gendisk", "major")?,
        disk_first_minor: off(k, "gendisk", "first_minor")?,
        op_mask: if op_bits < 32 {
            (1 << op_bits) - 1
        } else {
            u32::MAX
        },
        bit_sync: bit(k, "__REQ_SYNC")?,
        bit_meta: bit(k, "__REQ_META")?,
        bit_fua: bit(k, "__REQ_FUA")?,
        bit_preflush: bit(k, "__REQ_PREFLUSH")?,
        bit_rahead: bit(k, "__REQ_RAHEAD")?,
        rq_flags: off(k, "request", "rq_flags")?,
        // An enum from 6.x; a #define before (then every insert counts).
        bit_use_sched: k
            .enum_value("__RQF_USE_SCHED")
            .map_or(u32::MAX, |v| u32::try_from(v).unwrap_or(u32::MAX)),
    };
    // The completion probe reads q, cmd_flags and __sector in one 64-byte read.
    let head_fits = [
        (offsets.rq_q, 8),
        (offsets.rq_cmd_flags, 4),
        (offsets.rq_sector, 8),
    ]
    .iter()
    .all(|&(offset, size)| offset + size <= 64 && offset % size == 0);
    if !head_fits {
        return Err(
            "struct request lays out q, cmd_flags or __sector beyond its first 64 bytes"
                .to_string(),
        );
    }
    Ok(offsets)
}

/// Offsets for blaming a request on its cgroup and, for write-back, on the process that
/// dirtied its pages; each half is off (with the reason) when BTF lacks a member of its chain.
pub fn blame(k: &KernelFacts) -> (BlameOffsets, Vec<String>) {
    let mut offsets = BlameOffsets::OFF;
    let mut missing = Vec::new();
    let Ok(rq_bio) = off(k, "request", "bio") else {
        missing.push("kernel BTF has no request.bio: no cgroup and no write-back blame".into());
        return (offsets, missing);
    };
    offsets.rq_bio = rq_bio;
    let cgroup = (|| {
        Ok::<_, String>((
            off(k, "bio", "bi_blkg")?,
            off(k, "blkcg_gq", "blkcg")?,
            off(k, "blkcg", "css")? + off(k, "cgroup_subsys_state", "cgroup")?,
            off(k, "cgroup", "kn")?,
            off(k, "kernfs_node", "id")?,
        ))
    })();
    match cgroup {
        Ok((bio_blkg, blkg_blkcg, blkcg_cgroup, cgroup_kn, kn_id)) => {
            offsets.cgroup = 1;
            offsets.bio_blkg = bio_blkg;
            offsets.blkg_blkcg = blkg_blkcg;
            offsets.blkcg_cgroup = blkcg_cgroup;
            offsets.cgroup_kn = cgroup_kn;
            offsets.kn_id = kn_id;
        }
        Err(e) => missing.push(format!("{e}: requests have no cgroup")),
    }
    let pages = (|| {
        Ok::<_, String>((
            off(k, "bio", "bi_io_vec")?,
            off(k, "bio_vec", "bv_page")?,
            page_head(k)?,
            off(k, "page", "mapping")?,
        ))
    })();
    match pages {
        Ok((bio_io_vec, bvec_page, (page_compound_head, page_head_mask), page_mapping)) => {
            offsets.writeback = 1;
            offsets.bio_io_vec = bio_io_vec;
            offsets.bvec_page = bvec_page;
            offsets.page_compound_head = page_compound_head;
            offsets.page_head_mask = page_head_mask;
            offsets.page_mapping = page_mapping;
        }
        Err(e) => {
            missing.push(format!(
                "{e}: write-back is charged to the flusher, not to the process that dirtied the pages"
            ));
            return (offsets, missing);
        }
    }
    let host = (|| {
        Ok::<_, String>((
            off(k, "address_space", "host")?,
            off(k, "inode", "i_ino")?,
            off(k, "inode", "i_sb")?,
            off(k, "super_block", "s_dev")?,
        ))
    })();
    match host {
        Ok((mapping_host, inode_ino, inode_sb, sb_dev)) => {
            offsets.readahead = 1;
            offsets.mapping_host = mapping_host;
            offsets.inode_ino = inode_ino;
            offsets.inode_sb = inode_sb;
            offsets.sb_dev = sb_dev;
        }
        Err(e) => missing.push(format!("{e}: readahead reads do not name their file")),
    }
    (offsets, missing)
}

/// Where a tail page of a large folio says which page heads it, and whether it says so
/// with a mask (1) rather than the head's address (0). `compound_head` holds the address;
/// from 7.0 `compound_info` holds a mask where the kernel frees the struct pages of huge
/// pages (HVO, whose code brings `struct vmemmap_remap_walk` into BTF) and a struct page's
/// size is a power of two, the address otherwise (the kernel's `compound_info_has_mask()`).
fn page_head(k: &KernelFacts) -> Result<(u32, u32), String> {
    if let Some(head) = k.offset("page", "compound_head") {
        return Ok((head, 0));
    }
    let info = off(k, "page", "compound_info")
        .map_err(|_| "no page.compound_head or page.compound_info in the kernel's BTF")?;
    let page_size = k
        .member("folio", "page")
        .map(|m| m.size)
        .filter(|&size| size > 0)
        .ok_or("no folio.page in the kernel's BTF (the size of a struct page)")?;
    let hvo = k.member("vmemmap_remap_walk", "remap_pte").is_some();
    Ok((info, u32::from(hvo && page_size.is_power_of_two())))
}

/// Where a task's open file's inode and superblock are: the sync probes name the synced
/// file and its filesystem's block size from the kernel, during the call.
pub fn files(k: &KernelFacts) -> Result<FileOffsets, String> {
    if let Some(why) = &k.btf_error {
        return Err(why.clone());
    }
    Ok(FileOffsets {
        task_files: off(k, "task_struct", "files")?,
        files_fdt: off(k, "files_struct", "fdt")?,
        fdt_max_fds: off(k, "fdtable", "max_fds")?,
        fdt_fd: off(k, "fdtable", "fd")?,
        file_inode: off(k, "file", "f_inode")?,
        inode_ino: off(k, "inode", "i_ino")?,
        inode_sb: off(k, "inode", "i_sb")?,
        sb_dev: off(k, "super_block", "s_dev")?,
        sb_blocksize_bits: off(k, "super_block", "s_blocksize_bits")?,
        file_dentry: off(k, "file", "f_path")? + off(k, "path", "dentry")?,
        dentry_name: off(k, "dentry", "d_name")? + off(k, "qstr", "name")?,
        dentry_parent: off(k, "dentry", "d_parent")?,
        inode_mode: off(k, "inode", "i_mode")?,
    })
}

/// Where the raw direct-I/O probe finds the call in its `kiocb` and `iov_iter`.
pub fn dio(k: &KernelFacts) -> Result<RawDioOffsets, String> {
    Ok(RawDioOffsets {
        iocb_filp: off(k, "kiocb", "ki_filp")?,
        iocb_pos: off(k, "kiocb", "ki_pos")?,
        iocb_flags: off(k, "kiocb", "ki_flags")?,
        iter_count: off(k, "iov_iter", "count")?,
        inode_size: off(k, "inode", "i_size")?,
        ..RawDioOffsets::ZERO
    })
}

/// Where the raw `iomap_iter` probe finds a direct I/O call (kernels before 6.4).
pub fn dio_iter(k: &KernelFacts) -> Result<RawDioOffsets, String> {
    Ok(RawDioOffsets {
        inode_size: off(k, "inode", "i_size")?,
        iomap_iter_inode: off(k, "iomap_iter", "inode")?,
        iomap_iter_pos: off(k, "iomap_iter", "pos")?,
        iomap_iter_len: off(k, "iomap_iter", "len")?,
        iomap_iter_flags: off(k, "iomap_iter", "flags")?,
        iomap_iter_length: off(k, "iomap_iter", "iomap")? + off(k, "iomap", "length")?,
        ..RawDioOffsets::ZERO
    })
}
