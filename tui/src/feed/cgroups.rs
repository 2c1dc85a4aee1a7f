//! Cgroup names for the ids the probes read from each request (`bio->bi_blkg->blkcg`: the
//! inode number of the cgroup's directory), found by walking the hierarchy the block
//! controller is mounted in: cgroup v1 `blkio` when mounted, else the v2 unified tree.
//! Directory inode numbers are unique within one hierarchy only, hence the choice of one.

use std::{collections::HashMap, fs, os::unix::fs::MetadataExt as _, path::PathBuf};

/// Directories walked at most per refresh (a Kubernetes node has a few thousand).
const MAX_DIRS: usize = 50_000;
/// Least time between two walks started by an unknown id.
const REFRESH_AFTER_NS: u64 = 2_000_000_000;

#[derive(Default)]
pub struct CgroupNames {
    /// Where the block controller's hierarchy is mounted (None: no cgroup fs found).
    root: Option<PathBuf>,
    /// id -> path below the root ("/" for the root itself).
    paths: HashMap<u64, String>,
    walked_ns: Option<u64>,
}

impl CgroupNames {
    pub fn new() -> Self {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Self {
            root: block_hierarchy(&mountinfo),
            ..Self::default()
        }
    }

    /// The path of cgroup `id` below its hierarchy's root, walking the tree again (at most
    /// every 2 s) when the id is new.
    pub fn path(&mut self, id: u64, now_ns: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        if let Some(path) = self.paths.get(&id) {
            return Some(path.clone());
        }
        if self
            .walked_ns
            .is_some_and(|at| now_ns.saturating_sub(at) < REFRESH_AFTER_NS)
        {
            return None;
        }
        self.walked_ns = Some(now_ns);
        self.walk();
        self.paths.get(&id).cloned()
    }

    fn walk(&mut self) {
        let Some(root) = &self.root else { return };
        self.paths.clear();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            if self.paths.len() >= MAX_DIRS {
                break;
            }
            let Ok(meta) = fs::metadata(&dir) else {
                continue;
            };
            let relative = dir
                .strip_prefix(root)
                .map(|p| format!("/{}", p.display()))
                .unwrap_or_else(|_| "/".to_string());
            self.paths.insert(meta.ino(), relative);
            if let Ok(entries) = fs::read_dir(&dir) {
                stack.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
    }
}

/// The mount point of the hierarchy with the block controller: a v1 mount with `blkio` in
/// its options, else the cgroup2 mount.
pub fn block_hierarchy(mountinfo: &str) -> Option<PathBuf> {
    let mounts = super::io_controls::parse_mounts(mountinfo);
    mounts.blkio.or(mounts.unified)
}

/// A readable name for a cgroup path: the container, pod or systemd unit it belongs to
/// when the path says, else the path itself.
pub fn readable_name(path: &str) -> String {
    let leaf = path.rsplit('/').next().unwrap_or(path);
    let short = |id: &str| id.chars().take(12).collect::<String>();
    for (prefix, runtime) in [
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "cri-o"),
        ("libpod-", "podman"),
    ] {
        if let Some(rest) = leaf.strip_prefix(prefix) {
            let id = rest.trim_end_matches(".scope");
            return format!("{runtime}:{}", short(id));
        }
    }
    // cgroupfs drivers: /docker/<64 hex>, /kubepods/.../<64 hex>.
    if leaf.len() == 64 && leaf.bytes().all(|b| b.is_ascii_hexdigit()) {
        let runtime = if path.starts_with("/docker/") {
            "docker"
        } else {
            "container"
        };
        return format!("{runtime}:{}", short(leaf));
    }
    if let Some(pod) = path
        .split('/')
        .find_map(|part| part.strip_suffix(".slice")?.split("-pod").nth(1))
    {
        return format!("pod:{}", pod.replace('_', "-"));
    }
    if let Some(pod) = path.split('/').find_map(|part| part.strip_prefix("pod")) {
        return format!("pod:{pod}");
    }
    if leaf.ends_with(".service") || leaf.ends_with(".scope") || leaf.ends_with(".slice") {
        return leaf.to_string();
    }
    if path == "/" || path.is_empty() {
        return "/".to_string();
    }
    path.to_string()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_block_hierarchy_is_v1_blkio_when_mounted_else_v2() {
        let hybrid = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            block_hierarchy(hybrid).as_deref(),
            Some(Path::new("/sys/fs/cgroup/blkio"))
        );
        let unified = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
";
        assert_eq!(
            block_hierarchy(unified).as_deref(),
            Some(Path::new("/sys/fs/cgroup"))
        );
        let shared_v1 = "38 31 0:35 / /sys/fs/cgroup/blkio,cpu rw - cgroup cgroup rw,cpu,blkio
";
        assert_eq!(
            block_hierarchy(shared_v1).as_deref(),
            Some(Path::new("/sys/fs/cgroup/blkio,cpu"))
        );
        assert_eq!(block_hierarchy("garbage\n\n - \n"), None);
    }

    #[test]
    fn containers_pods_and_units_get_short_names() {
        let id = "4f2c8a1b9d3e".repeat(5) + "abcd";
        assert_eq!(
            readable_name(&format!("/system.slice/docker-{id}.scope")),
            "docker:4f2c8a1b9d3e"
        );
        assert_eq!(
            readable_name(&format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-{id}.scope"
            )),
            "containerd:4f2c8a1b9d3e"
        );
        assert_eq!(
            readable_name(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice"
            ),
            "pod:1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"
        );
        assert_eq!(
            readable_name(&format!("/docker/{id}")),
            "docker:4f2c8a1b9d3e"
        );
        assert_eq!(
            readable_name(&format!("/machine.slice/libpod-{id}.scope")),
            "podman:4f2c8a1b9d3e"
        );
        assert_eq!(
            readable_name("/system.slice/postgresql.service"),
            "postgresql.service"
        );
        assert_eq!(
            readable_name("/user.slice/user-1000.slice/session-3.scope"),
            "session-3.scope"
        );
        assert_eq!(readable_name("/iotop-bpf-test-12"), "/iotop-bpf-test-12");
        assert_eq!(readable_name("/"), "/");
    }
}
