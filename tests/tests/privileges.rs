//! Without privileges the tool says what is missing, clearly, and exits non-zero.

use std::{os::unix::process::CommandExt as _, process::Command};

use iotop_bpf_integration::{binary, require_root};

#[test]
#[ignore = "needs root (to switch to an unprivileged user): run with `cargo xtask test`"]
fn unprivileged_run_explains_and_fails() {
    if !require_root("unprivileged_run_explains_and_fails") {
        return;
    }
    // A copy anyone may execute: the checkout may sit in a directory `nobody` cannot enter.
    let dir = std::env::temp_dir().join(format!("iotop-bpf-unpriv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("iotop-bpf");
    std::fs::copy(binary(), &exe).unwrap();
    for path in [&dir, &exe] {
        let mut perms = std::fs::metadata(path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(path, perms).unwrap();
    }
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
