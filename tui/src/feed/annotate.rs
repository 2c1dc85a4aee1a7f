//! What the kernel's records do not say, added from what /proc, sysfs and the kernel's
//! stacks know, as each record is drained.

use super::{mounts, procfs, stacks};
use crate::model::{FileRef, Input, SyncKind};

/// Adds what the kernel maps, /proc and sysfs know: kernel threads, the file behind a sync
/// call's fd and its filesystem's block size, a direct I/O call's file and geometry, a D
/// episode's symbolized stack. Caches of an exited process are dropped.
pub(super) fn annotate(
    procs: &mut procfs::ProcCache,
    block_sizes: &mut mounts::BlockSizes,
    stacks: &mut stacks::StackBook,
    input: &mut Input,
    now_ns: u64,
) {
    match input {
        Input::DState(episode) => {
            let wakeup = std::mem::take(&mut episode.wakeup_stack);
            (episode.stack, episode.no_stack) =
                stacks.finished(episode.tid, episode.start_ns, episode.stack_id, &wakeup);
        }
        Input::Dio(call) => {
            call.fs_block_size = block_sizes.fs_block_size(call.fs_dev, now_ns).unwrap_or(0);
            let disk = block_sizes.disk(call.fs_dev);
            call.disk = disk.disk;
            call.logical_block_size = disk.logical_block_size;
            call.physical_block_size = disk.physical_block_size;
            call.fs_start_sector = disk.start_sector;
            call.file = procs
                .file_of_inode(call.tgid, call.fs_dev, call.ino)
                .or_else(|| procs.path_of_inode(call.fs_dev, call.ino))
                .or_else(|| {
                    (!call.name.is_empty()).then(|| {
                        FileRef::Inode {
                            dev: call.fs_dev,
                            ino: call.ino,
                            name: call.name.clone(),
                        }
                        .to_string()
                    })
                });
            if let Some(path) = &call.file
                && path.starts_with('/')
            {
                procs.remember_inode_path(call.fs_dev, call.ino, path);
            }
        }
        Input::Block(io) => io.kernel_thread = procs.is_kernel_thread(io.tgid),
        Input::Sync(call) => {
            // msync has no fd: its range's mapping names the file.
            if call.kind == SyncKind::Msync
                && call.addr != 0
                && let Some(mapped) = procs.mapped_file(call.tgid, call.addr, now_ns)
            {
                call.fs_dev = Some(mapped.dev);
                call.ino = mapped.ino;
                procs.remember_inode_path(mapped.dev, mapped.ino, &mapped.path);
                call.file = FileRef::Path(mapped.path);
            }
            let fs_dev = if let Some(fd) = call.fd {
                let expect = call
                    .fs_dev
                    .filter(|_| call.ino != 0)
                    .map(|dev| (dev, call.ino));
                let (file, fs_dev) = procs.resolve_fd(call.tgid, fd, expect, now_ns);
                call.file = file;
                fs_dev
            } else {
                None
            };
            // The kernel named the file's filesystem and inode during the call; /proc only
            // if the process is still there (a short-lived one is often gone), and an
            // io_uring sync has no fd to look up.
            if let (FileRef::Unresolved(_), Some(dev)) = (&call.file, call.fs_dev)
                && call.ino != 0
            {
                call.file = procs.path_of_inode(dev, call.ino).map_or_else(
                    || FileRef::Inode {
                        dev,
                        ino: call.ino,
                        name: call.name.clone(),
                    },
                    FileRef::Path,
                );
            }
            if call.fd.is_some()
                && let FileRef::Path(path) = &call.file
                && let Some(dev) = call.fs_dev.or(fs_dev)
            {
                procs.remember_inode_path(dev, call.ino, path);
            }
            if let Some(fs_dev) = call.fs_dev.or(fs_dev) {
                call.fs_dev = Some(fs_dev);
                call.dev = Some(block_sizes.disk(fs_dev).disk);
                if call.fs_block_size == 0 {
                    call.fs_block_size = block_sizes.fs_block_size(fs_dev, now_ns).unwrap_or(0);
                }
            }
        }
        Input::Exit(exit) => procs.forget(exit.tgid),
        Input::BadRecords(_) | Input::Sample(_) => {}
    }
}
