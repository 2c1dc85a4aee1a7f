//! Each request's cgroup, read by the probes from its bio's blkcg, named in user space.

use std::process::Command;

use iotop_bpf_integration::{BlkioThrottle, JsonRun, LoopFs, require_root};

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_direct_io_writer_in_a_blkio_cgroup_shows_that_cgroup() {
    if !require_root("a_direct_io_writer_in_a_blkio_cgroup_shows_that_cgroup") {
        return;
    }
    for fs_kind in ["ext4", "xfs"] {
        direct_writer_in_a_group_on(fs_kind);
    }
}

fn direct_writer_in_a_group_on(fs_kind: &str) {
    let fs = LoopFs::new(fs_kind, 512);
    // A limit far above what dd does: the group is there to be named, not to throttle.
    let group = BlkioThrottle::new(&fs.dev, 100_000);
    let run = JsonRun::start(&[]);
    let out = fs.path("direct");
    let script = format!(
        "echo $$ > /sys/fs/cgroup/blkio/{}/cgroup.procs && exec dd if=/dev/zero of={} bs=64k count=200 oflag=direct",
        group.name,
        out.display()
    );
    let mut dd = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let dd_pid = u64::from(dd.id());
    assert!(dd.wait().unwrap().success(), "dd in the cgroup failed");
    // And one outside it, in the root group.
    let outside = Command::new("dd")
        .args([
            "if=/dev/zero",
            &format!("of={}", fs.path("outside").display()),
            "bs=64k",
            "count=50",
            "oflag=direct",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let outside_pid = u64::from(outside.id());
    assert!(outside.wait_with_output().unwrap().status.success());
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let intervals = run.stop();

    let cgroup_of = |pid: u64| -> Vec<(String, String)> {
        intervals
            .iter()
            .flat_map(|i| i["processes"].as_array().unwrap().iter())
            .filter(|p| p["pid"].as_u64() == Some(pid) && p["writes"].as_u64() > Some(0))
            .map(|p| {
                (
                    p["cgroup"].as_str().unwrap_or("null").to_string(),
                    p["cgroup_path"].as_str().unwrap_or("null").to_string(),
                )
            })
            .collect()
    };
    let inside = cgroup_of(dd_pid);
    let expected = format!("/{}", group.name);
    assert!(!inside.is_empty(), "dd (pid {dd_pid}) was not reported");
    for (name, path) in &inside {
        assert_eq!(path, &expected, "dd's cgroup path");
        assert_eq!(name, &expected, "a plain group is named by its path");
    }
    let root = cgroup_of(outside_pid);
    assert!(!root.is_empty(), "the second dd was not reported");
    for (name, path) in &root {
        assert_eq!((name.as_str(), path.as_str()), ("/", "/"), "the root group");
    }
    eprintln!("{fs_kind}: dd {dd_pid}: {inside:?}; dd {outside_pid}: {root:?}");
}
