//! `dsync-writes FILE COUNT SIZE`: COUNT writes of SIZE bytes to FILE opened with O_DSYNC,
//! each one a sync the filesystem's fsync tracepoint sees inside the write: the kernel
//! matrix's arm64 guests check with it that the write is recognised from the thread's
//! registers there (busybox's dd has no `oflag=dsync`).

use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(Ok(count)), Some(Ok(size))) = (
        args.first(),
        args.get(1).map(|n| n.parse::<usize>()),
        args.get(2).map(|n| n.parse::<usize>()),
    ) else {
        eprintln!("usage: dsync-writes FILE COUNT SIZE");
        std::process::exit(2);
    };
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DSYNC)
        .open(path)
    {
        Ok(file) => file,
        Err(e) => {
            eprintln!("dsync-writes: {path}: {e}");
            std::process::exit(1);
        }
    };
    let record = vec![b'r'; size];
    for _ in 0..count {
        if let Err(e) = file.write_all(&record) {
            eprintln!("dsync-writes: {path}: {e}");
            std::process::exit(1);
        }
    }
}
