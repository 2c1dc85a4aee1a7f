//! A second viewer: the live view runs as root in one tmux pane, `iotop-bpf attach` as
//! `nobody` (uid 65534) in another, given the socket through `--viewers-group`. Both show the
//! same intervals; a viewer that stalls loses frames (counted) without slowing the tool; a
//! viewer that leaves or comes back, or a tool that restarts, harms nothing; TCP wants the
//! token, and a user outside the group is refused in words.

use std::{
    collections::BTreeSet,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use iotop_bpf_integration::{LoopFs, binary, require_root, tmux::Tmux, unprivileged_copy};

/// Panes large enough for the whole process table.
const SIZE: (u16, u16) = (120, 40);
/// `nobody`'s gid (its primary group under `setpriv --regid=65534`).
const NOBODY: &str = "65534";

/// `EXE attach ARGS` as nobody, with no supplementary group.
fn as_nobody(exe: &std::path::Path, args: &str) -> String {
    format!(
        "setpriv --reuid=65534 --regid=65534 --clear-groups {} attach {args}",
        exe.display()
    )
}

/// A writer on a scratch filesystem that runs until dropped: every interval has rows.
struct Workload {
    child: Child,
    _fs: LoopFs,
}

impl Workload {
    fn start() -> Self {
        let fs = LoopFs::new("ext4", 64);
        let child = Command::new(binary())
            .args([
                "workload",
                "small-sync",
                "--count",
                "100000000",
                "--interval-ms",
                "5",
            ])
            .arg("--dir")
            .arg(&fs.mountpoint)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Self { child, _fs: fs }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What identifies the interval on screen: the status line's uptime and event rate, and the
/// process table's rows (the panes below may differ: the viewer's history is shorter).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone)]
struct Shown {
    up: String,
    events: String,
    rows: Vec<String>,
}

fn shown(screen: &str) -> Option<Shown> {
    let status = screen.lines().next()?;
    let words: Vec<&str> = status.split_whitespace().collect();
    let at = |word: &str| words.iter().position(|w| *w == word);
    let up = words.get(at("up")? + 1)?.to_string();
    let events = words.get(at("ev/s")?.checked_sub(1)?)?.to_string();
    let mut rows: Vec<String> = screen
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("PID     COMM"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty() && !l.contains("───"))
        .map(|l| l.trim_end().to_string())
        .collect();
    // The same rows, not the same order: each pane keeps its own order from interval to
    // interval (near-equal rows do not swap), and the viewer's began later than the tool's.
    rows.sort();
    Some(Shown { up, events, rows })
}

/// Waits until both panes show the same interval, with the workload's row, `count` times
/// over different intervals; returns the last.
fn same_intervals(tool: &Tmux, viewer: &Tmux, workload: u32, count: usize) -> Shown {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = BTreeSet::new();
    let pid = workload.to_string();
    loop {
        let (a, b) = (tool.screen(), viewer.screen());
        if let (Some(a), Some(b)) = (shown(&a), shown(&b))
            && a == b
            && a.rows
                .iter()
                .any(|r| r.split_whitespace().next() == Some(&pid))
        {
            seen.insert(a.clone());
            if seen.len() >= count {
                return a;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the panes never showed the same interval {count} times ({} so far):\n{}\n{}",
            seen.len(),
            tool.screen(),
            viewer.screen()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

fn uptime(tmux: &Tmux) -> String {
    shown(&tmux.screen()).map(|s| s.up).unwrap_or_default()
}

/// Seconds in `H:MM:SS`.
fn seconds(up: &str) -> u64 {
    up.split(':')
        .map(|p| p.parse::<u64>().unwrap_or(0))
        .fold(0, |acc, n| acc * 60 + n)
}

fn tool_command(extra: &str) -> String {
    format!(
        "{} -d 0.2 {extra}; echo EXIT=$?; sleep 120",
        binary().display()
    )
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_second_pane_attaches_as_nobody_and_shows_the_same_intervals() {
    if !require_root("a_second_pane_attaches_as_nobody_and_shows_the_same_intervals") {
        return;
    }
    let (dir, exe) = unprivileged_copy("attach");
    let workload = Workload::start();
    let tool = Tmux::start_sized(
        "attach-tool",
        SIZE,
        &tool_command(&format!("--viewers-group {NOBODY}")),
    );
    tool.wait_for("q quit");
    let socket = format!("/run/iotop-bpf/{}.sock", tool.tool_pid());
    check_socket(&socket);

    // No argument: the one running tool's socket is found.
    let view_cmd = format!("{}; echo EXIT=$?; sleep 120", as_nobody(&exe, ""));
    let viewer = Tmux::start_sized("attach-viewer", SIZE, &view_cmd);
    let screen = viewer.wait_for("[attached]");
    assert!(screen.contains(&format!("at {socket}")), "{screen}");
    let viewer_pid = viewer.tool_pid();
    let uid = std::fs::read_to_string(format!("/proc/{viewer_pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_string());
    assert_eq!(uid.as_deref(), Some("65534"), "the viewer runs as nobody");
    same_intervals(&tool, &viewer, workload.pid(), 3);

    // Its own sort and pause: the tool's screen is not touched.
    own_sort_and_pause(&tool, &viewer);

    // A viewer that stalls (stopped) loses frames; the tool goes on meanwhile.
    stall(&tool, &viewer, viewer_pid);
    same_intervals(&tool, &viewer, workload.pid(), 2);

    // The viewer leaves (q: its terminal is given back) and comes back: nothing harmed.
    viewer.keys("q");
    let screen = viewer.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(!viewer.alternate_screen());
    drop(viewer);
    let up = seconds(&uptime(&tool));
    let viewer = Tmux::start_sized(
        "attach-viewer2",
        SIZE,
        &format!("{}; echo EXIT=$?; sleep 120", as_nobody(&exe, &socket)),
    );
    viewer.wait_for("[attached]");
    same_intervals(&tool, &viewer, workload.pid(), 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    while seconds(&uptime(&tool)) <= up {
        assert!(
            Instant::now() < deadline,
            "the tool stopped:\n{}",
            tool.screen()
        );
        thread::sleep(Duration::from_millis(100));
    }
    assert!(!tool.screen().contains("EXIT="), "{}", tool.screen());

    // The tool quits: the viewer says so and keeps its screen; its socket is gone. A tool
    // started again is found again (this viewer named the old socket: it says why not).
    tool.keys("q");
    let screen = tool.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    let screen = viewer.wait_for("[DISCONNECTED]");
    assert!(screen.contains("disconnected: "), "{screen}");
    assert!(!std::path::Path::new(&socket).exists(), "{socket} removed");
    drop(viewer);
    drop(tool);
    // Nothing to attach to: said plainly, before any terminal is taken.
    let found = Tmux::start_sized(
        "attach-viewer3",
        SIZE,
        &format!("{}; echo EXIT=$?; sleep 120", as_nobody(&exe, "")),
    );
    let screen = found.wait_for("EXIT=");
    assert!(
        screen.contains("no running iotop-bpf publishes for viewers") && screen.contains("EXIT=1"),
        "{screen}"
    );
    drop(found);
    let tool = Tmux::start_sized(
        "attach-tool2",
        SIZE,
        &tool_command(&format!("--viewers-group {NOBODY}")),
    );
    tool.wait_for("q quit");
    let viewer = Tmux::start_sized("attach-viewer4", SIZE, &view_cmd);
    viewer.wait_for("[attached]");
    // Restarted: the viewer finds the new tool and starts a fresh history.
    tool.keys("q");
    viewer.wait_for("[DISCONNECTED]");
    drop(tool);
    let tool = Tmux::start_sized(
        "attach-tool3",
        SIZE,
        &tool_command(&format!("--viewers-group {NOBODY}")),
    );
    tool.wait_for("q quit");
    viewer.wait_for("[attached]");
    same_intervals(&tool, &viewer, workload.pid(), 2);
    viewer.keys("q");
    tool.keys("q");
    let screen = viewer.wait_for("EXIT=");
    assert!(
        screen.contains("EXIT=0") && !screen.contains("panicked"),
        "{screen}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The socket is for the viewers' group: mode 0660, group nobody's.
fn check_socket(socket: &str) {
    let meta = std::fs::metadata(socket).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o660
    );
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), 65534);
}

/// The viewer sorts and pauses on its own: the tool's screen is not touched.
fn own_sort_and_pause(tool: &Tmux, viewer: &Tmux) {
    viewer.keys("s");
    viewer.wait_for("by p50");
    viewer.keys("space");
    viewer.wait_for("[PAUSED ");
    assert!(!tool.screen().contains("[PAUSED "));
    assert!(tool.screen().contains("by I/O MB/s"));
    viewer.keys("space");
    viewer.keys("<");
    viewer.wait_for("by I/O MB/s");
}

/// A viewer stopped for 20 s loses frames, and says how many; the tool goes on meanwhile.
fn stall(tool: &Tmux, viewer: &Tmux, viewer_pid: i32) {
    let before = seconds(&uptime(tool));
    // SAFETY: a pid of ours, and valid signals.
    unsafe { libc::kill(viewer_pid, libc::SIGSTOP) };
    thread::sleep(Duration::from_secs(20));
    let during = seconds(&uptime(tool));
    // SAFETY: as above.
    unsafe { libc::kill(viewer_pid, libc::SIGCONT) };
    assert!(
        during >= before + 15,
        "the tool went on while its viewer was stopped: up {before}s -> {during}s"
    );
    let screen = viewer.wait_for(" lost]");
    let lost: u64 = screen
        .lines()
        .next()
        .and_then(|l| l.split("[attached, ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{screen}"));
    // 20 s at 5 intervals a second: 100 frames, of which its queue and socket hold fewer
    // than half.
    assert!(lost >= 30, "{lost} frames lost of ~100:\n{screen}");
    eprintln!(
        "stopped 20 s: the tool went from up {before}s to {during}s, the viewer lost {lost} frames"
    );
}

/// `attach` run plainly (no terminal): (exit code, stderr).
fn attach_plainly(exe: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(exe)
        .arg("attach")
        .args(args)
        .env_remove("IOTOP_BPF_VIEWERS_TOKEN");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn tcp_wants_the_token_and_the_socket_its_group() {
    if !require_root("tcp_wants_the_token_and_the_socket_its_group") {
        return;
    }
    let (dir, exe) = unprivileged_copy("attach-tcp");
    // A free port: bound by the kernel's choice, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let token = "s3cret-token-for-the-test";
    let tool = Tmux::start_sized(
        "attach-tcp",
        SIZE,
        &format!(
            "IOTOP_BPF_VIEWERS_TOKEN={token} {}",
            tool_command(&format!("--viewers-listen {addr}"))
        ),
    );
    // The key line says how TCP viewers attach (the token given is not shown).
    let screen = tool.wait_for("TCP viewers attach with");
    assert!(!screen.contains(token), "{screen}");
    let socket = format!("/run/iotop-bpf/{}.sock", tool.tool_pid());

    let (code, err) = attach_plainly(
        &exe,
        &[&addr],
        &[("IOTOP_BPF_VIEWERS_TOKEN", "wrong-token")],
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err.trim(),
        format!("iotop-bpf: {addr} refused this viewer: wrong token")
    );
    let (code, err) = attach_plainly(&exe, &[&addr], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("needs the token"), "{err}");
    // No --viewers-group: the socket is the tool's user's and group's only.
    let (code, err) = attach_plainly(&exe, &[&socket], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("permission denied") && err.contains("--viewers-group"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    let viewer = Tmux::start_sized(
        "attach-tcp-viewer",
        SIZE,
        &format!(
            "IOTOP_BPF_VIEWERS_TOKEN={token} {}; echo EXIT=$?; sleep 120",
            as_nobody(&exe, &addr)
        ),
    );
    let screen = viewer.wait_for("[attached]");
    assert!(screen.contains(&format!("at {addr}")), "{screen}");
    let up = seconds(&uptime(&viewer));
    let deadline = Instant::now() + Duration::from_secs(30);
    while seconds(&uptime(&viewer)) < up + 2 {
        assert!(Instant::now() < deadline, "{}", viewer.screen());
        thread::sleep(Duration::from_millis(100));
    }
    viewer.keys("q");
    tool.keys("q");
    let screen = tool.wait_for("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    let _ = std::fs::remove_dir_all(dir);
}
