//! Without privileges the tool says what is missing, clearly, and exits non-zero.

use std::{os::unix::process::CommandExt as _, process::Command};

use iotop_bpf_integration::{require_root, unprivileged_copy};

#[test]
#[ignore = "needs root (to switch to an unprivileged user): run with `cargo xtask test`"]
fn unprivileged_run_explains_and_fails() {
    if !require_root("unprivileged_run_explains_and_fails") {
        return;
    }
    let (dir, exe) = unprivileged_copy("unpriv");
    for args in [&["--json", "-n", "1"][..], &[][..], &["--batch"][..]] {
        let out = Command::new(&exe)
            .args(args)
            .uid(65534)
            .gid(65534)
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("needs root") && stderr.contains("sudo iotop-bpf"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "{stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "nothing on stdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
