//! The system-call probes' plan on every kernel of the matrix: trampolines or the raw pair,
//! and each architecture's numbers and registers.

use iotop_bpf_common::{
    raw::{SYSCALL_NONE, SYSCALL_WRITE},
    sync::SYNC_FSYNC,
};

use super::{ARM64, KERNELS, X86_64, planned, programs, step};
use crate::plan::{Attach, Options, Part, Step, TRAMPOLINES};

#[test]
fn system_calls_ride_trampolines_where_the_kernel_has_them_safe_and_the_raw_pair_else() {
    for kernel in KERNELS {
        let plan = planned(kernel, Options::default(), None);
        let trampolines: Vec<&Step> = plan.steps.iter().filter(|s| s.is_trampoline()).collect();
        let twin = step(&plan, "raw_sys_enter").and_then(|s| s.instead_of);
        // 5.10's BTF has no `__x64_sys_msync` taking the registers: the raw pair alone.
        if kernel == "5.10" {
            assert!(trampolines.is_empty(), "{kernel}");
            assert_eq!(twin, None, "{kernel}");
            assert!(
                plan.syscall_path.starts_with("raw sys_enter/sys_exit")
                    && plan.syscall_path.contains("__x64_sys_msync"),
                "{kernel}: {}",
                plan.syscall_path
            );
            continue;
        }
        assert!(plan.syscall_path.starts_with("trampolines"), "{kernel}");
        // 11 calls on both sides, and io_uring_enter's return.
        assert_eq!(trampolines.len(), 23, "{kernel}");
        let prefix = if kernel.starts_with("arm64") {
            "__arm64_sys_"
        } else {
            "__x64_sys_"
        };
        for s in &trampolines {
            let (Attach::Entry(function) | Attach::Exit(function)) = s.attach else {
                unreachable!()
            };
            assert!(
                function.starts_with(prefix) || function == "__do_sys_sync",
                "{kernel}: {function}"
            );
            assert_eq!(s.part, Part::Trampolines, "{kernel}");
            // The exit before the entry: nothing begun is left without its end.
            if let Attach::Entry(_) = s.attach {
                let at = |p| programs(&plan).iter().position(|&q| q == p);
                assert!(
                    at(s.after.unwrap()) < at(s.program),
                    "{kernel}: {}",
                    s.program
                );
            }
        }
        // The raw pair after them, only in their stead.
        assert_eq!(twin, Some(TRAMPOLINES), "{kernel}");
        assert_eq!(
            step(&plan, "raw_sys_exit").and_then(|s| s.instead_of),
            Some(TRAMPOLINES),
            "{kernel}"
        );
        let at = |p| programs(&plan).iter().position(|&q| q == p);
        assert!(at("fexit_io_uring_enter") < at("raw_sys_exit"), "{kernel}");
    }
    // x86-64's `sync` has no arguments: its `__x64_sys_sync` is an alias, not in BTF.
    let plan = planned("6.12", Options::default(), None);
    assert_eq!(
        step(&plan, "fentry_sync").map(|s| s.attach),
        Some(Attach::Entry("__do_sys_sync"))
    );
}

#[test]
fn system_calls_go_through_raw_sys_enter_and_sys_exit_with_the_kernels_numbers() {
    for kernel in KERNELS {
        let plan = planned(kernel, Options::default(), None);
        let at = |p| programs(&plan).iter().position(|&q| q == p);
        assert!(
            at("raw_sys_exit") < at("raw_sys_enter"),
            "{kernel}: exit first"
        );
        assert!(
            plan.globals.raw_layout.regs_args.iter().all(|&a| a < 64),
            "{kernel}: the arguments within one 64-byte read"
        );
    }
    // Each kernel's own numbers, whatever machine this runs on: fsync, pwrite64, read.
    for (kernels, fsync, pwrite64, read) in [(&X86_64[..], 74, 18, 0), (&ARM64[..], 82, 68, 63)] {
        for &kernel in kernels {
            let g = planned(kernel, Options::default(), None).globals;
            assert_eq!(g.syscall_table[fsync], SYNC_FSYNC, "{kernel}: fsync");
            assert_eq!(
                g.syscall_table[pwrite64], SYSCALL_WRITE,
                "{kernel}: pwrite64"
            );
            assert_eq!(g.syscall_table[read], SYSCALL_NONE, "{kernel}: read");
        }
    }
    // arm64: x0 to x3 are regs[0..3], at the start of struct pt_regs.
    for kernel in ARM64 {
        let l = planned(kernel, Options::default(), None).globals.raw_layout;
        assert_eq!(
            (l.regs_window, l.regs_args),
            (0, [0, 8, 16, 24]),
            "{kernel}"
        );
    }
}
