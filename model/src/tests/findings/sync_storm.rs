//! `sync_storm`: many syncs a second, named with their files, judged when the burst
//! settles; batched writers, flushes after aligned direct writes and a checkpoint's one
//! burst are no storm.

use super::*;

#[test]
fn autocommit_inserts_are_a_sync_storm_named_with_their_files() {
    // SQLite in autocommit mode, as it does it per row: the rollback journal (a page or two
    // and its header), the directory, and the database page, each fdatasynced.
    let mut s = Stream::new();
    for i in 0..60u64 {
        let t = i * 16 * MS;
        let journal = "/data/app.db-journal";
        // Each sync writes its pages itself; the journal commits for the first one.
        s.write_request(42, "sqlite3", t + MS, 8192, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 2 * MS, 8192, false, true);
        s.sync_file(42, SyncKind::Fdatasync, t, t + 5 * MS, 8720, 3, journal);
        // The directory's sync writes a log tree of its own on btrfs: its cost, no payload.
        s.write_request(42, "sqlite3", t + 5 * MS + 500 * US, 65_536, true, false);
        s.sync_dir(42, SyncKind::Fdatasync, t + 5 * MS, t + 6 * MS, "/data");
        s.write_request(42, "sqlite3", t + 7 * MS, 4096, true, false);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 6 * MS,
            t + 8 * MS,
            12,
            1,
            journal,
        );
        s.write_request(42, "sqlite3", t + 9 * MS, 8192, true, false);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 8 * MS,
            t + 15 * MS,
            8192,
            2,
            "/data/app.db",
        );
    }
    let found = s.findings();
    let storm = of_kind(&found, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{found:?}");
    assert!(
        storm[0].files.contains(&"/data/app.db".to_string()),
        "{:?}",
        storm[0].files
    );
    assert!(
        storm[0].summary.contains("/data/app.db"),
        "{}",
        storm[0].summary
    );
    assert_eq!(
        storm[0].severity,
        Severity::Critical,
        "waiting ~90% of the time"
    );
}

#[test]
fn a_storm_over_hundreds_of_files_names_the_latest_too() {
    // An installer: each new file written (8 KiB) and fdatasynced once, back to back, and
    // its status file every tenth.
    let mut s = Stream::new();
    for i in 0..120u64 {
        let t = i * 8 * MS;
        let file = if i % 10 == 0 {
            "/root/var/lib/dpkg/status".to_string()
        } else {
            format!("/root/usr/lib/pkg/mod{i}.py.dpkg-new")
        };
        s.write_request(42, "lab001", t + MS, 8192, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 2 * MS, 8192, false, true);
        s.sync_file(42, SyncKind::Fdatasync, t, t + 7 * MS, 8192, 2, &file);
    }
    let found = s.findings();
    let storm = of_kind(&found, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{found:?}");
    assert!(
        storm[0].summary.contains(
            "on 9 files or more, the most synced /root/var/lib/dpkg/status (12x), lately \
             /root/usr/lib/pkg/mod119.py.dpkg-new"
        ),
        "{}",
        storm[0].summary
    );
}

#[test]
fn a_burst_is_judged_when_it_settles_after_the_process_exited() {
    // sqlite3 ran for 100 ms at the end of one interval and exited; its calls settle in the
    // next interval, which judges them (and still names the file).
    let mut s = Stream::new();
    for i in 0..100u64 {
        let t = 900 * MS + i * MS;
        s.write_request(42, "sqlite3", t + 100 * US, 8192, true, false);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t,
            t + 800 * US,
            8192,
            2,
            "/data/app.db",
        );
    }
    s.model.apply(&Input::Exit(crate::ProcessExit {
        tgid: 42,
        ts_ns: 1_000 * MS,
    }));
    let first = s.model.tick(&KernelSample {
        now_ns: 1_000 * MS,
        page_size: 4096,
        ..KernelSample::default()
    });
    assert!(
        of_kind(&first.findings, FindingKind::SyncStorm).is_empty(),
        "not settled yet"
    );
    let second = s.model.tick(&KernelSample {
        now_ns: 2_000 * MS,
        page_size: 4096,
        ..KernelSample::default()
    });
    let storm = of_kind(&second.findings, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{:?}", second.findings);
    assert_eq!(storm[0].file(), Some("/data/app.db"));
    assert!(
        second.procs.iter().any(|p| p.tgid == 42),
        "kept until its calls settled"
    );
    let third = s.model.tick(&KernelSample {
        now_ns: 3_000 * MS,
        page_size: 4096,
        ..KernelSample::default()
    });
    assert!(third.procs.iter().all(|p| p.tgid != 42), "then forgotten");
}

#[test]
fn a_storm_judged_in_the_next_interval_names_the_files_it_judged() {
    // dpkg: 100 small files fsynced at the end of one interval settle in the next, where it
    // syncs only its database: the finding judges the 100 and must name theirs.
    let mut s = Stream::new();
    for i in 0..100u64 {
        let t = 900 * MS + i * MS;
        let file = format!("/root/usr/lib/pkg/mod{i}.py.dpkg-new");
        s.write_request(42, "dpkg", t + 100 * US, 8192, true, false);
        s.sync_file(42, SyncKind::Fsync, t, t + 800 * US, 2048, 1, &file);
    }
    let first = s.model.tick(&KernelSample {
        now_ns: 1_000 * MS,
        page_size: 4096,
        ..KernelSample::default()
    });
    assert!(
        of_kind(&first.findings, FindingKind::SyncStorm).is_empty(),
        "not settled yet"
    );
    for i in 0..3u64 {
        let t = 1_100 * MS + i * MS;
        s.sync_file(
            42,
            SyncKind::Fsync,
            t,
            t + 800 * US,
            2048,
            1,
            "/root/var/lib/dpkg/status",
        );
    }
    let second = s.model.tick(&KernelSample {
        now_ns: 2_000 * MS,
        page_size: 4096,
        ..KernelSample::default()
    });
    let storm = of_kind(&second.findings, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{:?}", second.findings);
    assert!(
        storm[0].summary.contains("on 9 files or more") && storm[0].summary.contains(".dpkg-new"),
        "{}",
        storm[0].summary
    );
    assert_eq!(
        storm[0].fix,
        crate::findings::write_amplification::MANY_FILES_FIX
    );
}

#[test]
fn a_batched_writer_is_not_a_storm() {
    // The same inserts, 1000 rows per transaction, as SQLite does it: ~13 KiB of journal,
    // the directory, the journal header, ~53 KiB of database per commit. The process still
    // waits in its syncs most of the time, but each commit carries plenty of payload.
    let mut s = Stream::new();
    for i in 0..30u64 {
        let t = i * 33 * MS;
        let journal = "/data/app.db-journal";
        s.write_request(42, "sqlite3", t + MS, 12_288, true, false);
        s.write_request(300, "jbd2/loop0-8", t + 2 * MS, 8192, false, true);
        s.sync_file(42, SyncKind::Fdatasync, t, t + 9 * MS, 12_824, 4, journal);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 9 * MS,
            t + 10 * MS,
            0,
            0,
            "/data",
        );
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 10 * MS,
            t + 12 * MS,
            12,
            1,
            journal,
        );
        s.write_request(42, "sqlite3", t + 13 * MS, 53_248, true, false);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 12 * MS,
            t + 31 * MS,
            53_248,
            13,
            "/data/app.db",
        );
    }
    let found = s.findings();
    assert!(
        found.iter().all(|f| f.severity == Severity::Info),
        "a batched writer raised {found:?}"
    );
}

#[test]
fn a_flush_after_each_aligned_direct_write_is_not_a_storm() {
    // The data is on the device already: each fdatasync only flushes the cache (flush_heavy
    // judges that), it writes nothing itself.
    let mut s = Stream::new();
    for i in 0..500 {
        s.write_request(42, "db", i * MS, 4096, false, false);
        s.sync(
            42,
            SyncKind::Fdatasync,
            i * MS + 60 * US,
            i * MS + 900 * US,
            4096,
            1,
        );
    }
    let found = s.findings();
    assert!(
        of_kind(&found, FindingKind::SyncStorm).is_empty(),
        "{found:?}"
    );
}

/// `n` small files each fsynced once, `gap` apart: a checkpoint's flush, or an unpacker's.
fn each_file_once(n: u64, gap: u64) -> Vec<Finding> {
    let mut s = Stream::new();
    files_synced_once(&mut s, 200 * MS, n, gap);
    s.findings()
}

fn files_synced_once(s: &mut Stream, from: u64, n: u64, gap: u64) {
    for i in 0..n {
        let t = from + i * gap;
        s.write_request(42, "postgres", t + gap / 4, 8192, true, false);
        s.sync_file(
            42,
            SyncKind::Fsync,
            t,
            t + gap / 2,
            8192,
            2,
            &format!("/data/base/5/1640{i}"),
        );
    }
}

#[test]
fn a_checkpoints_one_burst_is_not_a_storm() {
    // PostgreSQL shutting down (pgbench with synchronous_commit=off, in the corpus): the
    // checkpoint fsyncs each of 21 files once, within 14 ms.
    let found = each_file_once(21, 14 * MS / 21);
    assert!(
        of_kind(&found, FindingKind::SyncStorm).is_empty(),
        "{found:?}"
    );
    // The same 21 calls spread over 80 ms, once, are not one either (etcd's start: bbolt
    // creating its database, 14 fdatasyncs in 102 ms, then none).
    let found = each_file_once(21, 4 * MS);
    assert!(
        of_kind(&found, FindingKind::SyncStorm).is_empty(),
        "{found:?}"
    );
    // 60 in 30 ms are: an unpacker on a fast disk.
    let found = each_file_once(60, MS / 2);
    assert_eq!(
        of_kind(&found, FindingKind::SyncStorm).len(),
        1,
        "{found:?}"
    );
}

#[test]
fn a_thin_storm_is_named_once_it_keeps_coming() {
    // 21 small fsyncs over 80 ms of every second: listed from the third second running.
    let mut s = Stream::new();
    let mut listed = Vec::new();
    for second in 0..4 {
        files_synced_once(&mut s, second * 1_000 * MS + 200 * MS, 21, 4 * MS);
        let found = s.tick((second + 1) * 1_000 * MS).findings;
        listed.push(of_kind(&found, FindingKind::SyncStorm).len());
    }
    assert_eq!(listed, [0, 0, 1, 1]);
}

#[test]
fn a_log_block_written_by_o_direct_then_fdatasynced_per_row_is_a_storm() {
    // InnoDB committing row by row: ~700 B of redo log written by O_DIRECT into its block,
    // then fdatasync, which only flushes the device's cache. Seen as a pair: the commit wrote
    // its piece of the block, and a flush, per row.
    let mut s = Stream::new();
    for i in 0..500 {
        s.write_request(42, "mariadbd", i * MS, 1024, false, false);
        s.flush_request(42, "mariadbd", i * MS + 100 * US, true, false);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            i * MS + 60 * US,
            i * MS + 900 * US,
            700,
            1,
            "/var/lib/mysql/ib_logfile0",
        );
    }
    let found = s.findings();
    let storm = of_kind(&found, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{found:?}");
    assert!(
        storm[0]
            .summary
            .contains("flushed a log block written by O_DIRECT just before"),
        "{}",
        storm[0].summary
    );
    assert_eq!(
        storm[0].files,
        vec!["/var/lib/mysql/ib_logfile0".to_string()]
    );
    assert!(
        storm[0].fix.contains("innodb_flush_log_at_trx_commit"),
        "{}",
        storm[0].fix
    );
}

#[test]
fn a_whole_log_block_rewritten_by_o_direct_per_row_is_a_storm_too() {
    // InnoDB on ext4: the current 4 KiB log block rewritten whole at each commit (the same
    // sector until it fills), then fdatasync. New blocks each time would be healthy
    // (`a_flush_after_each_aligned_direct_write_is_not_a_storm`).
    let mut s = Stream::new();
    for i in 0..500u64 {
        let t = i * MS;
        s.model.ingest(&BlockIo {
            dev: DISK,
            sector: 8_192 + (i / 6) * 8,
            bytes: 4096,
            op: Op::Write,
            flags: 0,
            tgid: 42,
            tid: 42,
            comm: Comm::new("mariadbd"),
            created_ns: t,
            issued_ns: t + US,
            completed_ns: t + 40 * US,
            error: 0,
            kernel_thread: false,
            cgroup: 0,
            dirtier: None,
            file: None,
        });
        s.flush_request(42, "mariadbd", t + 100 * US, true, false);
        s.sync_file(
            42,
            SyncKind::Fdatasync,
            t + 60 * US,
            t + 900 * US,
            4096,
            1,
            "/var/lib/mysql/ib_logfile0",
        );
    }
    let found = s.findings();
    let storm = of_kind(&found, FindingKind::SyncStorm);
    assert_eq!(storm.len(), 1, "{found:?}");
    assert!(
        storm[0].summary.contains("written by O_DIRECT just before"),
        "{}",
        storm[0].summary
    );
}
