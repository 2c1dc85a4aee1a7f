//! Whether the block and wakeup probes can run on raw tracepoints here, with which offsets.

use iotop_bpf_common::{
    blame::BlameOffsets, block::RawOffsets, dio::RawDioOffsets, sync::FileOffsets,
};

use super::{btf::Btf, tracefs::Tracefs};

/// Set to `classic` to force the classic tracepoints (for comparison and tests).
pub const MODE_ENV: &str = "IOTOP_BPF_TRACEPOINTS";

/// The offsets for the raw probes, or why the classic tracepoints are used.
pub fn plan(
    tracefs: &Tracefs,
    kernel: (u32, u32),
    btf: Result<&Btf, &String>,
) -> Result<RawOffsets, String> {
    if std::env::var(MODE_ENV).is_ok_and(|v| v == "classic") {
        return Err(format!("{MODE_ENV}=classic"));
    }
    // block_io_start (6.5+) is what attributes requests; the raw block_rq_issue and
    // block_rq_merge take the request alone from 5.11.
    if kernel < (6, 5) || !matches!(tracefs.format("block", "block_io_start"), Ok(Some(_))) {
        return Err("no block_io_start tracepoint (kernel < 6.5)".to_string());
    }
    let btf = btf.map_err(Clone::clone)?;
    let offsets = offsets(btf).map_err(|e| format!("kernel BTF: {e}"))?;
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
pub fn blame_offsets(btf: &Btf) -> (BlameOffsets, Vec<String>) {
    let mut offsets = BlameOffsets::OFF;
    let mut missing = Vec::new();
    let Ok(rq_bio) = btf.member_offset("request", "bio") else {
        missing.push("kernel BTF has no request.bio: no cgroup and no write-back blame".into());
        return (offsets, missing);
    };
    offsets.rq_bio = rq_bio;
    let cgroup = (|| {
        Ok::<_, super::btf::BtfError>((
            btf.member_offset("bio", "bi_blkg")?,
            btf.member_offset("blkcg_gq", "blkcg")?,
            btf.member_offset("blkcg", "css")?
                + btf.member_offset("cgroup_subsys_state", "cgroup")?,
            btf.member_offset("cgroup", "kn")?,
            btf.member_offset("kernfs_node", "id")?,
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
        Err(e) => missing.push(format!("kernel BTF: {e}: requests have no cgroup")),
    }
    let pages = (|| {
        Ok::<_, super::btf::BtfError>((
            btf.member_offset("bio", "bi_io_vec")?,
            btf.member_offset("bio_vec", "bv_page")?,
            btf.member_offset("page", "compound_head")?,
            btf.member_offset("page", "mapping")?,
        ))
    })();
    match pages {
        Ok((bio_io_vec, bvec_page, page_compound_head, page_mapping)) => {
            offsets.writeback = 1;
            offsets.bio_io_vec = bio_io_vec;
            offsets.bvec_page = bvec_page;
            offsets.page_compound_head = page_compound_head;
            offsets.page_mapping = page_mapping;
        }
        Err(e) => missing.push(format!(
            "kernel BTF: {e}: write-back is charged to the flusher, not to the process that dirtied the pages"
        )),
    }
    (offsets, missing)
}

/// Where a task's open file's inode and superblock are: the sync probes name the synced
/// file and its filesystem's block size from the kernel, during the call.
pub fn file_offsets(btf: &Btf) -> Result<FileOffsets, super::btf::BtfError> {
    Ok(FileOffsets {
        task_files: btf.member_offset("task_struct", "files")?,
        files_fdt: btf.member_offset("files_struct", "fdt")?,
        fdt_max_fds: btf.member_offset("fdtable", "max_fds")?,
        fdt_fd: btf.member_offset("fdtable", "fd")?,
        file_inode: btf.member_offset("file", "f_inode")?,
        inode_ino: btf.member_offset("inode", "i_ino")?,
        inode_sb: btf.member_offset("inode", "i_sb")?,
        sb_dev: btf.member_offset("super_block", "s_dev")?,
        sb_blocksize_bits: btf.member_offset("super_block", "s_blocksize_bits")?,
        file_dentry: btf.member_offset("file", "f_path")? + btf.member_offset("path", "dentry")?,
        dentry_name: btf.member_offset("dentry", "d_name")? + btf.member_offset("qstr", "name")?,
        dentry_parent: btf.member_offset("dentry", "d_parent")?,
        _pad: 0,
    })
}

/// Where the raw direct-I/O probe finds the call in its `kiocb` and `iov_iter`.
pub fn dio_offsets(btf: &Btf) -> Result<RawDioOffsets, super::btf::BtfError> {
    Ok(RawDioOffsets {
        iocb_filp: btf.member_offset("kiocb", "ki_filp")?,
        iocb_pos: btf.member_offset("kiocb", "ki_pos")?,
        iocb_flags: btf.member_offset("kiocb", "ki_flags")?,
        iter_count: btf.member_offset("iov_iter", "count")?,
        inode_size: btf.member_offset("inode", "i_size")?,
        _pad: 0,
    })
}

fn offsets(btf: &Btf) -> Result<RawOffsets, super::btf::BtfError> {
    let bit = |name: &str| {
        btf.enum_value(name)
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
    };
    // REQ_OP_BITS is a #define; the first flag bit comes right after the operation bits.
    let op_bits = bit("__REQ_FAILFAST_DEV")?;
    // Optional: without it every wakeup looks its thread up.
    let load_bit = btf
        .member_bit_offset("task_struct", "sched_contributes_to_load")
        .ok();
    Ok(RawOffsets {
        rq_sector: btf.member_offset("request", "__sector")?,
        rq_data_len: btf.member_offset("request", "__data_len")?,
        rq_cmd_flags: btf.member_offset("request", "cmd_flags")?,
        rq_q: btf.member_offset("request", "q")?,
        q_disk: btf.member_offset("request_queue", "disk")?,
        disk_major: btf.member_offset("gendisk", "major")?,
        disk_first_minor: btf.member_offset("gendisk", "first_minor")?,
        task_pid: btf.member_offset("task_struct", "pid")?,
        task_comm: btf.member_offset("task_struct", "comm")?,
        op_mask: if op_bits < 32 {
            (1 << op_bits) - 1
        } else {
            u32::MAX
        },
        bit_sync: bit("__REQ_SYNC")?,
        bit_meta: bit("__REQ_META")?,
        bit_fua: bit("__REQ_FUA")?,
        bit_preflush: bit("__REQ_PREFLUSH")?,
        bit_rahead: bit("__REQ_RAHEAD")?,
        rq_flags: btf.member_offset("request", "rq_flags")?,
        bit_use_sched: bit("__RQF_USE_SCHED").unwrap_or(u32::MAX),
        task_load_word: load_bit.map_or(0, |bits| bits / 32 * 4),
        task_load_bit: load_bit.map_or(u32::MAX, |bits| bits % 32),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernels_btf_gives_every_offset() {
        let Some(btf) = super::super::btf::tests::kernel_btf("this_kernels_btf_gives_every_offset")
        else {
            return;
        };
        let files = file_offsets(&btf).unwrap();
        let dio = dio_offsets(&btf).unwrap();
        assert!(dio.iter_count > 0 && dio.iocb_pos > 0, "{dio:?}");
        assert!(files.task_files > 0 && files.inode_sb > 0 && files.sb_dev > 0);
        let o = offsets(&btf).unwrap();
        assert_eq!(o.op_mask, 0xff, "REQ_OP_BITS is 8");
        assert!(o.bit_sync > 7 && o.bit_preflush > o.bit_sync);
        assert!(o.task_comm > o.task_pid);
        assert!(o.task_load_bit < 32 && o.task_load_word > 0, "{o:?}");
    }
}
