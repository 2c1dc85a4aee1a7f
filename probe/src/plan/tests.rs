//! The plan against the facts captured in every kernel of the matrix
//! (`probe/tests/data/kernels/*.json`, from `iotop-bpf check --facts` in each guest).

use iotop_bpf_common::{
    block::{ORIGIN_INSERT, ORIGIN_START},
    dstate::CLOCK_RQ_QUEUED,
    sync::{RAW_COMPLETE_CQE, RAW_COMPLETE_RES},
    tracepoint::ABSENT,
};

use super::*;
use crate::{
    access::{Access, Memlock},
    facts::fixture,
};

/// Every kernel of the matrix, x86-64's and arm64's.
const KERNELS: [&str; 7] = [
    "5.10",
    "6.1",
    "6.12",
    "6.18",
    "7.3",
    "arm64-6.1",
    "arm64-6.12",
];
const X86_64: [&str; 5] = ["5.10", "6.1", "6.12", "6.18", "7.3"];
const ARM64: [&str; 2] = ["arm64-6.1", "arm64-6.12"];

/// The plan for `kernel` with `options` and, if given, other access; every question the plan
/// asked had been answered when the fixture was captured.
fn planned(kernel: &str, options: Options, access: Option<Access>) -> Plan {
    let mut facts = fixture(kernel);
    if let Some(access) = access {
        facts = facts.with_access(access);
    }
    let plan = plan(&facts, options).unwrap_or_else(|e| panic!("{kernel}: {e}"));
    assert_eq!(
        facts.unanswered(),
        Vec::<String>::new(),
        "{kernel}: the fixture lacks answers: capture it again (`iotop-bpf check --facts` in that kernel)"
    );
    plan
}

fn step<'a>(plan: &'a Plan, program: &str) -> Option<&'a Step> {
    plan.steps.iter().find(|s| s.program == program)
}

fn programs(plan: &Plan) -> Vec<&'static str> {
    plan.steps.iter().map(|s| s.program).collect()
}

/// What Debian's kernels do to a process with only the documented capabilities:
/// `perf_event_open` refused at `kernel.perf_event_paranoid=3`.
fn documented_capabilities(kernel: &str) -> Access {
    let mut access = fixture(kernel).access;
    access.caps = (1 << 38) | (1 << 39) | (1 << 2) | (1 << 19) | (1 << 34) | (1 << 24);
    access.perf_event_open = Err("Permission denied (os error 13)".into());
    access
}

#[test]
fn every_kernel_of_the_matrix_gets_raw_block_probes_with_its_own_layout() {
    for kernel in KERNELS {
        let plan = planned(kernel, Options::default(), None);
        assert!(
            plan.mode.starts_with("raw tracepoints"),
            "{kernel}: {}",
            plan.mode
        );
        // The typed probes first (direct loads), the raw ones where the kernel refuses
        // them; whichever loads is required.
        for (typed, raw) in [
            ("block_issue_btf", "raw_block_issue"),
            ("block_complete_btf", "raw_block_complete"),
        ] {
            let first = step(&plan, typed).unwrap_or_else(|| panic!("{kernel}: {typed}"));
            assert!(
                !first.required
                    && matches!(first.attach, Attach::Btf(_))
                    && first.part == Part::TypedReads,
                "{kernel}: {first:?}"
            );
            let s = step(&plan, raw).unwrap_or_else(|| panic!("{kernel}: {raw}"));
            assert!(
                s.required && matches!(s.attach, Attach::Raw(_)) && s.instead_of == Some(typed),
                "{kernel}: {s:?}"
            );
        }
        // Debian's 5.10.262 has the single-argument block tracepoints (backported from
        // 5.11): the request comes first on every kernel here, found in BTF.
        assert_eq!(plan.globals.raw_layout.rq_arg, 0, "{kernel}");
        let g = &plan.globals;
        assert!(
            g.raw_offsets.rq_sector > 0 && g.dstate.task_comm > 0,
            "{kernel}"
        );
    }
    // Before 6.5 no block_io_start: the insert is the creation, and no scheduler split.
    for kernel in ["5.10", "6.1", "arm64-6.1"] {
        let plan = planned(kernel, Options::default(), None);
        assert_eq!(plan.globals.start_origin, ORIGIN_INSERT, "{kernel}");
        assert!(step(&plan, "raw_block_start_insert").is_some(), "{kernel}");
        assert!(step(&plan, "raw_block_insert").is_none(), "{kernel}");
        assert!(
            plan.notes.iter().any(|n| n.contains("no block_io_start")),
            "{kernel}: {:?}",
            plan.notes
        );
    }
    for kernel in ["6.12", "6.18", "7.3", "arm64-6.12"] {
        let plan = planned(kernel, Options::default(), None);
        assert_eq!(plan.globals.start_origin, ORIGIN_START, "{kernel}");
        assert!(step(&plan, "raw_block_start").is_some());
        assert!(step(&plan, "raw_block_insert").is_some(), "the btt split");
    }
    // 5.10's requests point at their disk; later kernels reach it through the queue.
    assert_ne!(
        planned("5.10", Options::default(), None)
            .globals
            .raw_layout
            .rq_disk,
        ABSENT
    );
    for kernel in ["6.1", "6.12", "6.18", "7.3", "arm64-6.1", "arm64-6.12"] {
        let plan = planned(kernel, Options::default(), None);
        assert_eq!(plan.globals.raw_layout.rq_disk, ABSENT, "{kernel}");
        assert!(plan.globals.raw_offsets.q_disk > 0, "{kernel}");
    }
    // Write-back blame: the page tracepoint before folios (5.10), the folio one after.
    let blame = |kernel| {
        planned(kernel, Options::default(), None)
            .steps
            .iter()
            .find(|s| s.program == "blame_dirty_folio")
            .map(|s| s.attach)
    };
    assert_eq!(blame("5.10"), Some(Attach::Raw("writeback_dirty_page")));
    assert_eq!(blame("6.18"), Some(Attach::Raw("writeback_dirty_folio")));
}

#[test]
fn a_tail_page_leads_to_its_head_as_each_kernels_btf_says() {
    // compound_head (the head's address, bit 0 set) to 6.x; 7.x's compound_info holds a
    // mask where HVO is built in and a struct page is 64 bytes (Debian's 7.3.4).
    for kernel in KERNELS {
        let b = planned(kernel, Options::default(), None).globals.blame;
        assert_eq!(b.writeback, 1, "{kernel}: write-back blame on");
        let facts = fixture(kernel);
        let mask = kernel == "7.3";
        let word = if mask {
            "compound_info"
        } else {
            "compound_head"
        };
        assert_eq!(
            (b.page_compound_head, b.page_head_mask),
            (facts.offset("page", word).unwrap(), u32::from(mask)),
            "{kernel}"
        );
    }
}

#[test]
fn the_d_state_switch_reads_the_state_where_the_kernel_keeps_it() {
    // 5.10: no prev_state argument; task_struct.state is a long.
    let plan = planned("5.10", Options::default(), None);
    let o = plan.globals.dstate;
    assert_eq!(o.switch_state_arg, ABSENT);
    assert_eq!(o.task_state_size, 8);
    assert!(o.task_state > 0);
    // 6.1 on: sched_switch(preempt, prev, next, prev_state).
    for kernel in ["6.1", "6.12", "6.18", "7.3", "arm64-6.1", "arm64-6.12"] {
        let o = planned(kernel, Options::default(), None).globals.dstate;
        assert_eq!(o.switch_state_arg, 3, "{kernel}");
    }
    for kernel in KERNELS {
        let plan = planned(kernel, Options::default(), None);
        // Both ends on sched_switch: BTF-typed (it takes the sleeper's stack), the plain one
        // in its place if refused; no wakeup program.
        let btf = step(&plan, "dstate_switch_btf").unwrap();
        assert_eq!(btf.attach, Attach::Btf("sched_switch"), "{kernel}");
        let plain = step(&plan, "dstate_switch_raw").unwrap();
        assert_eq!(plain.instead_of, Some("dstate_switch_btf"), "{kernel}");
        // Threads still in D: a task iterator, where the BTF-typed switch (which takes no
        // stack at the switch out) is attached.
        let stuck = step(&plan, "dstate_stuck").unwrap();
        assert_eq!(stuck.attach, Attach::Iter("task"), "{kernel}");
        assert_eq!(stuck.after, Some("dstate_switch_btf"), "{kernel}");
        assert!(
            !plan.steps.iter().any(|s| matches!(
                s.attach,
                Attach::Raw("sched_wakeup") | Attach::Btf("sched_wakeup")
            )),
            "{kernel}"
        );
        let o = plan.globals.dstate;
        assert!(o.task_load_bit < 32, "{kernel}");
        assert!(o.task_state > 0, "the iterator reads the state: {kernel}");
        // Every kernel here keeps the wakeup's enqueue stamp, on the runqueue clock reached
        // through the task's CFS runqueue (Debian builds with group scheduling).
        assert_eq!(o.clock, CLOCK_RQ_QUEUED, "{kernel}");
        assert!(o.task_last_queued > o.task_cfs_rq, "{kernel}");
        assert_ne!(o.cfs_rq_rq, ABSENT, "{kernel}");
        assert!(
            !plan.notes.iter().any(|n| n.contains("D episodes end")),
            "{kernel}: {:?}",
            plan.notes
        );
    }
    // Exits: group_dead is an argument on 6.18, task->signal->live before.
    assert_eq!(
        planned("6.18", Options::default(), None)
            .globals
            .raw_layout
            .exit_group_dead_arg,
        1
    );
    let l = planned("6.12", Options::default(), None).globals.raw_layout;
    assert_eq!(l.exit_group_dead_arg, ABSENT);
    assert!(l.task_signal > 0 && l.signal_live != ABSENT);
}

#[test]
fn the_write_that_synced_is_read_from_each_architectures_registers() {
    // x86-64: the fd in di, the number in orig_ax (a long).
    let b = planned("6.12", Options::default(), None)
        .globals
        .durable_btf;
    let regs = |m| fixture("6.12").offset("pt_regs", m).unwrap();
    assert_eq!((b.regs_arg0, b.regs_nr), (regs("di"), regs("orig_ax")));
    assert_eq!(b.write_nrs, [1, 18, 20, 296, 328]);
    // arm64: the fd in orig_x0 (x0 becomes the result), the number in syscallno, an s32
    // the probe reads as 4 bytes: 6.1 has bpf_task_pt_regs, and uses it.
    for kernel in ARM64 {
        let plan = planned(kernel, Options::default(), None);
        let b = plan.globals.durable_btf;
        assert!(b.reads_registers(), "{kernel}");
        assert_eq!((b.regs_arg0, b.regs_nr), (272, 280), "{kernel}");
        assert_eq!(b.write_nrs, [64, 68, 66, 70, 287], "{kernel}");
        assert_eq!(b.uring_enter_nr, 426, "{kernel}");
        assert!(
            !plan.notes.iter().any(|n| n.contains("bpf_task_pt_regs")),
            "{kernel}: {:?}",
            plan.notes
        );
        for source in [SyncSourceKind::SyncedWritesExt4, SyncSourceKind::SyncCalls] {
            let s = plan.sync_sources.iter().find(|s| s.kind == source).unwrap();
            assert!(
                s.status.as_ref().is_ok_and(|how| how.contains("raw")),
                "{kernel}: {s:?}"
            );
        }
    }
}

#[test]
fn the_syscall_numbers_are_the_architectures_own() {
    #[cfg(target_arch = "x86_64")]
    let abi = syscalls::Abi::X86_64;
    #[cfg(target_arch = "aarch64")]
    let abi = syscalls::Abi::Aarch64;
    let libc = [
        libc::SYS_fsync,
        libc::SYS_fdatasync,
        libc::SYS_sync_file_range,
        libc::SYS_syncfs,
        libc::SYS_sync,
        libc::SYS_msync,
        libc::SYS_write,
        libc::SYS_pwrite64,
        libc::SYS_writev,
        libc::SYS_pwritev,
        libc::SYS_pwritev2,
    ];
    let ours: Vec<i64> = abi.calls().map(|(_, nr, _)| i64::from(nr)).collect();
    assert_eq!(ours, libc);
    assert_eq!(i64::from(abi.io_uring_enter()), libc::SYS_io_uring_enter);
    for abi in [syscalls::Abi::X86_64, syscalls::Abi::Aarch64] {
        assert!(
            abi.calls()
                .all(|(_, nr, _)| (nr as usize) < iotop_bpf_common::raw::SYSCALL_TABLE_LEN)
        );
    }
}

#[test]
fn durable_sources_follow_each_kernels_btf() {
    let source = |plan: &Plan, kind| {
        plan.sync_sources
            .iter()
            .find(|s| s.kind == kind)
            .unwrap()
            .status
            .clone()
    };
    // 5.10: no module BTF (ext4's tracepoints are classic), no bpf_task_pt_regs (no XFS
    // synced writes), and an io_uring_complete that passes no request.
    let plan = planned("5.10", Options::default(), None);
    assert!(step(&plan, "durable_ext4_enter").is_some());
    let xfs = source(&plan, SyncSourceKind::SyncedWritesXfs).unwrap_err();
    assert!(xfs.contains("bpf_task_pt_regs"), "{xfs}");
    assert!(source(&plan, SyncSourceKind::UringSyncs).is_err());
    assert!(!plan.globals.durable_btf.reads_registers());
    // 6.1 on: everything raw, the registers read, io_uring followed.
    for kernel in ["6.1", "6.12", "6.18", "7.3"] {
        let plan = planned(kernel, Options::default(), None);
        for program in [
            "raw_durable_ext4_enter",
            "raw_durable_xfs",
            "raw_uring_punt",
        ] {
            assert!(step(&plan, program).is_some(), "{kernel}: {program}");
        }
        assert!(
            plan.globals.raw_layout.xfs_inode_vnode != ABSENT,
            "{kernel}"
        );
        assert!(plan.globals.durable_btf.reads_registers(), "{kernel}");
        assert!(
            source(&plan, SyncSourceKind::UringSyncs).is_ok(),
            "{kernel}"
        );
        let complete = step(&plan, "raw_uring_complete").unwrap();
        assert!(
            complete.deferred,
            "{kernel}: attached from the first io_uring sync"
        );
    }
    assert_eq!(
        planned("6.1", Options::default(), None)
            .globals
            .durable_btf
            .raw_complete,
        RAW_COMPLETE_RES
    );
    assert_eq!(
        planned("6.18", Options::default(), None)
            .globals
            .durable_btf
            .raw_complete,
        RAW_COMPLETE_CQE
    );
}

#[test]
fn the_raw_dirty_pause_is_converted_from_this_kernels_jiffies() {
    // Debian's kernels tick at 250 Hz: the raw `pause` of 12 jiffies is 48 ms, not 12.
    let mut facts = fixture("6.12");
    facts.tick_ns = Some(4_000_000);
    let planned = plan(&facts, Options::default()).unwrap();
    assert_eq!(planned.globals.raw_layout.jiffy_us, 4_000);
    // A record that did not note the tick: unknown (the probe takes 1 ms).
    let mut facts = fixture("6.12");
    facts.tick_ns = None;
    let planned = plan(&facts, Options::default()).unwrap();
    assert_eq!(planned.globals.raw_layout.jiffy_us, 0);
}

#[test]
fn dirty_pauses_and_direct_io_by_kernel() {
    // balance_dirty_pages: twelve arguments to 6.12, a dirty_throttle_control on 6.18.
    for kernel in ["5.10", "6.1", "6.12"] {
        let plan = planned(kernel, Options::default(), None);
        assert!(step(&plan, "raw_dirty_pause").is_some(), "{kernel}");
        let l = plan.globals.raw_layout;
        assert_eq!(
            (l.dirty_pause_arg, l.dirty_dtc_arg),
            (10, ABSENT),
            "{kernel}"
        );
    }
    let l = planned("6.18", Options::default(), None).globals.raw_layout;
    assert_eq!(l.dirty_dtc_arg, 1);
    assert_eq!(l.dirty_pause_arg, 6);
    // iomap_dio_rw_begin arrived in 6.4.
    for kernel in ["6.12", "6.18"] {
        let plan = planned(kernel, Options::default(), None);
        assert!(
            step(&plan, "raw_dio_begin").is_some() && plan.call_latency,
            "{kernel}"
        );
    }
}

#[test]
fn the_documented_capabilities_need_no_perf_event_open_where_btf_describes_everything() {
    for kernel in ["6.1", "6.12", "6.18", "7.3", "arm64-6.1", "arm64-6.12"] {
        let plan = planned(
            kernel,
            Options::default(),
            Some(documented_capabilities(kernel)),
        );
        let classic: Vec<_> = plan
            .steps
            .iter()
            .filter(|s| matches!(s.attach, Attach::Classic(..)))
            .collect();
        assert!(classic.is_empty(), "{kernel}: {classic:?}");
        assert!(
            !plan.notes.iter().any(|n| n.contains("perf_event")),
            "{kernel}: {:?}",
            plan.notes
        );
    }
    // 5.10 lacks the ext4 module's BTF: its synced writes need a classic tracepoint, which
    // Debian refuses without CAP_SYS_ADMIN. Said, with what to do; the rest is raw.
    let plan = planned(
        "5.10",
        Options::default(),
        Some(documented_capabilities("5.10")),
    );
    assert!(
        plan.steps
            .iter()
            .all(|s| matches!(s.attach, Attach::Raw(_) | Attach::Btf(_) | Attach::Iter(_)))
    );
    let note = plan
        .notes
        .iter()
        .find(|n| n.contains("writes on ext4"))
        .unwrap_or_else(|| panic!("{:?}", plan.notes));
    assert!(
        note.contains("perf_event_paranoid=3") && note.contains("CAP_SYS_ADMIN"),
        "{note}"
    );
    assert_eq!(fixture("5.10").access.memlock, Memlock::Rlimit);
}

#[test]
fn classic_tracepoints_can_be_forced_and_need_perf_event_open() {
    let classic = planned(
        "6.18",
        Options {
            classic: true,
            ..Options::default()
        },
        None,
    );
    assert!(
        classic.mode.starts_with("classic tracepoints"),
        "{}",
        classic.mode
    );
    assert!(step(&classic, "block_complete").is_some_and(|s| s.required));
    assert!(step(&classic, "sync_exit").is_some());
    assert!(
        classic
            .steps
            .iter()
            .all(|s| matches!(s.attach, Attach::Classic(..)))
    );
    let err = plan(
        &fixture("6.12").with_access(documented_capabilities("6.12")),
        Options {
            classic: true,
            ..Options::default()
        },
    )
    .unwrap_err();
    assert!(
        err.contains("perf_event_paranoid=3") && err.contains("CAP_SYS_ADMIN"),
        "{err}"
    );
}

#[test]
fn a_program_is_planned_after_the_one_it_follows() {
    let mut steps = vec![
        Step::raw("enter", "a", Part::SyncCalls).after("exit"),
        Step::raw("exit", "b", Part::SyncCalls),
        Step::raw("orphan", "c", Part::SyncCalls).after("missing"),
    ];
    order(&mut steps);
    let names: Vec<_> = steps.iter().map(|s| s.program).collect();
    assert_eq!(
        names,
        ["exit", "enter"],
        "what follows nothing planned is dropped"
    );
}

#[test]
fn the_inode_mode_is_at_offset_zero_so_absence_is_not_zero() {
    // `i_mode` is struct inode's first field: a zero offset is a real one, and the probes
    // tell absence by ABSENT (a zero sentinel once made every fd count as a file).
    for kernel in KERNELS {
        let plan = planned(kernel, Options::default(), None);
        assert_eq!(plan.globals.files.inode_mode, 0, "{kernel}");
    }
    assert_eq!(iotop_bpf_common::sync::FileOffsets::ZERO.inode_mode, ABSENT);
}

#[test]
fn under_lockdown_confidentiality_the_typed_block_probes_run_alone_and_blame_is_named_off() {
    // Confidentiality refuses bpf_probe_read_kernel and hides tracefs's events (Debian's
    // 6.12). The typed block probes read by direct loads, which it leaves: they are planned
    // required, with no raw fallback (which reads with the helper), and blame, which follows
    // untyped pointers, is off and named.
    let mut facts = fixture("6.18");
    facts.lockdown = Some("confidentiality".to_string());
    for tracefs_error in [None, Some("tracefs is not mounted".to_string())] {
        facts.tracefs_error = tracefs_error;
        let plan = plan(&facts, Options::default()).unwrap();
        for typed in ["block_issue_btf", "block_complete_btf"] {
            let s = step(&plan, typed).unwrap_or_else(|| panic!("{typed}"));
            assert!(s.required && matches!(s.attach, Attach::Btf(_)), "{s:?}");
        }
        for raw in ["raw_block_issue", "raw_block_complete", "raw_block_insert"] {
            assert!(step(&plan, raw).is_none(), "{raw} planned under lockdown");
        }
        assert_eq!(
            plan.globals.blame,
            iotop_bpf_common::blame::BlameOffsets::OFF
        );
        assert!(
            plan.notes
                .iter()
                .any(|n| n.contains("lockdown=confidentiality")
                    && n.contains("charged to the flusher")),
            "{:?}",
            plan.notes
        );
        assert!(step(&plan, "blame_dirty_folio").is_none());
    }
    // Integrity, as Secure Boot sets it on Debian and Ubuntu, takes nothing the probes use.
    facts.tracefs_error = None;
    facts.lockdown = Some("integrity".to_string());
    let integrity = plan(&facts, Options::default()).unwrap();
    assert!(
        integrity.mode.starts_with("raw tracepoints"),
        "{}",
        integrity.mode
    );
    assert!(step(&integrity, "raw_block_complete").is_some());
    assert_ne!(
        integrity.globals.blame,
        iotop_bpf_common::blame::BlameOffsets::OFF
    );
}

mod system_calls;
