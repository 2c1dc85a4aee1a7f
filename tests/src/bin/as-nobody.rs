//! `as-nobody +cap,+cap,... PROGRAM [ARGS...]`: runs PROGRAM as nobody (uid and gid 65534,
//! no supplementary groups) holding only the named capabilities (inheritable and ambient, so
//! they survive the exec), with RLIMIT_MEMLOCK unlimited. It does what
//! `setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=CAPS --ambient-caps=CAPS`
//! does for the smoke set (`as_nobody_with`), in the kernel matrix's arm64 guests, whose
//! busybox has a setpriv that cannot change the user.

use std::{os::unix::process::CommandExt as _, process::Command};

/// `struct __user_cap_header_struct`, version 3 (two 32-bit words per set).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The capabilities the documented set names (`linux/capability.h`).
fn number(name: &str) -> Option<u32> {
    Some(match name {
        "dac_read_search" => 2,
        "sys_ptrace" => 19,
        "sys_admin" => 21,
        "sys_resource" => 24,
        "syslog" => 34,
        "perfmon" => 38,
        "bpf" => 39,
        _ => return None,
    })
}

fn fail(what: &str) -> ! {
    eprintln!("as-nobody: {what}: {}", std::io::Error::last_os_error());
    std::process::exit(127);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(caps), Some(program)) = (args.next(), args.next()) else {
        eprintln!("usage: as-nobody +cap,+cap,... PROGRAM [ARGS...]");
        std::process::exit(2);
    };
    let mut numbers = Vec::new();
    for name in caps.split(',').filter(|c| !c.is_empty()) {
        let name = name.trim_start_matches('+');
        match number(name) {
            Some(n) => numbers.push(n),
            None => {
                eprintln!("as-nobody: unknown capability {name}");
                std::process::exit(2);
            }
        }
    }
    let mut sets = [CapData::default(); 2];
    for &n in &numbers {
        let data = &mut sets[(n / 32) as usize];
        let bit = 1 << (n % 32);
        data.effective |= bit;
        data.permitted |= bit;
        data.inheritable |= bit;
    }
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: plain system calls on values owned here; each result is checked.
    unsafe {
        if libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) != 0 {
            fail("setrlimit(RLIMIT_MEMLOCK)");
        }
        // Keep the permitted set across the change of user, then keep only the named ones.
        if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 {
            fail("prctl(PR_SET_KEEPCAPS)");
        }
        if libc::setgroups(0, std::ptr::null()) != 0 {
            fail("setgroups");
        }
        if libc::setresgid(65534, 65534, 65534) != 0 {
            fail("setresgid");
        }
        if libc::setresuid(65534, 65534, 65534) != 0 {
            fail("setresuid");
        }
        if libc::syscall(libc::SYS_capset, &raw const header, sets.as_ptr()) != 0 {
            fail("capset");
        }
        for &n in &numbers {
            let raise = libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong;
            if libc::prctl(libc::PR_CAP_AMBIENT, raise, libc::c_ulong::from(n), 0, 0) != 0 {
                fail("prctl(PR_CAP_AMBIENT_RAISE)");
            }
        }
    }
    let err = Command::new(&program).args(args).exec();
    eprintln!("as-nobody: exec {program}: {err}");
    std::process::exit(127);
}
