//! The incident's evidence survives the incident: a recording filesystem that fills up stops
//! the recording, never the live view or `serve`; a recording killed under load replays and
//! reports to its last whole interval, and says where it was cut.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use iotop_bpf_integration::{LoopFs, binary, require_root, sh, tmux::Tmux};
use serde_json::Value;

/// A tmpfs of `kib` KiB: a recording filesystem that fills up. Unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(tag: &str, kib: u32) -> Self {
        let dir = std::env::temp_dir().join(format!("iotop-bpf-full-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={kib}k"),
                "tmpfs",
                dir.to_str().unwrap(),
            ],
        );
        Self(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Direct 4 KiB writes on `fs`, many more than a small tmpfs holds the recording of.
fn heavy_writes(fs: &LoopFs, name: &str, writes: u32) -> std::process::Child {
    Command::new(binary())
        .args(["workload", "direct-io", "--reads", "0", "--writes"])
        .arg(writes.to_string())
        .arg("--file")
        .arg(fs.path(name))
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// `iotop-bpf --replay FILE --json`: (exit code, intervals, stderr).
fn replay(file: &Path) -> (Option<i32>, Vec<Value>, String) {
    let out = Command::new(binary())
        .arg("--replay")
        .arg(file)
        .arg("--json")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        out.status.code(),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn the_live_view_runs_on_through_a_full_recording_filesystem_and_says_so() {
    if !require_root("the_live_view_runs_on_through_a_full_recording_filesystem_and_says_so") {
        return;
    }
    let full = Tmpfs::new("live", 150);
    let fs = LoopFs::new("ext4", 512);
    let recording = full.0.join("live.rec");
    let tmux = Tmux::start_sized(
        "full",
        (200, 50),
        &format!(
            "{} -d 0.5 --record {}; echo EXIT=$?; sleep 120",
            binary().display(),
            recording.display()
        ),
    );
    tmux.wait_for("q quit");
    assert!(tmux.screen().contains("[REC]"), "{}", tmux.screen());
    let mut writer = heavy_writes(&fs, "fill", 100_000);
    let screen = tmux.wait_for("[REC STOPPED]");
    let _ = writer.kill();
    let _ = writer.wait();
    assert!(
        screen.contains("recording stopped at") && screen.contains("No space left on device"),
        "the key line says why:\n{screen}"
    );
    // The view goes on: its intervals keep coming after the disk filled.
    let up = |screen: &str| {
        screen
            .split_whitespace()
            .skip_while(|w| *w != "up")
            .nth(1)
            .map(str::to_string)
    };
    let before = up(&screen);
    thread::sleep(Duration::from_millis(2_500));
    let later = tmux.screen();
    assert_ne!(up(&later), before, "the view stopped:\n{later}");
    tmux.keys("q");
    let end = tmux.wait_for("EXIT=");
    assert!(end.contains("EXIT=0"), "{end}");
    // The exit message, once the terminal is back (it wraps at the pane's width).
    let end = end.replace('\n', "");
    assert!(end.contains("holds the intervals up to"), "{end}");
    let (code, intervals, stderr) = replay(&recording);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!intervals.is_empty(), "what was written replays: {stderr}");
    assert!(
        stderr.contains("the recording stopped at") && stderr.contains("No space left on device"),
        "{stderr}"
    );
    eprintln!(
        "live view: {} bytes recorded before the disk filled, {} intervals replayed",
        std::fs::metadata(&recording).unwrap().len(),
        intervals.len()
    );
}

/// A free local port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A sample's value from a scrape.
fn served(port: u16, series: &str) -> f64 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in the scrape:\n{body}"))
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn serve_runs_on_through_a_full_recording_filesystem_and_says_so() {
    if !require_root("serve_runs_on_through_a_full_recording_filesystem_and_says_so") {
        return;
    }
    let full = Tmpfs::new("serve", 150);
    let fs = LoopFs::new("ext4", 512);
    let recording = full.0.join("serve.rec");
    let port = free_port();
    let mut serve = Command::new(binary())
        .args(["serve", "-d", "0.5", "--no-viewers", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--record")
        .arg(&recording)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stderr = serve.stderr.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut said = Vec::new();
    let mut wait_for = |text: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !said.iter().any(|l: &String| l.contains(text)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => said.push(line),
                Err(_) => panic!("{text:?} never said: {said:#?}"),
            }
        }
        said.join("\n")
    };
    wait_for("serving metrics");
    let mut writer = heavy_writes(&fs, "fill", 100_000);
    let stop = wait_for("recording stopped at");
    let _ = writer.kill();
    let _ = writer.wait();
    assert!(stop.contains("No space left on device"), "{stop}");
    // The metrics go on, and say the recording stopped.
    let first = served(port, "iotop_bpf_intervals_total");
    thread::sleep(Duration::from_millis(1_500));
    assert!(
        served(port, "iotop_bpf_intervals_total") > first,
        "serve stopped with the recording"
    );
    assert_eq!(served(port, "iotop_bpf_recording_up"), 0.0);
    // SAFETY: kill with our child's pid and a valid signal.
    unsafe { libc::kill(i32::try_from(serve.id()).unwrap(), libc::SIGTERM) };
    assert!(serve.wait().unwrap().success());
    let end = wait_for("holds the intervals up to");
    assert!(end.contains("serve.rec"), "{end}");
    let (code, intervals, stderr) = replay(&recording);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!intervals.is_empty(), "{stderr}");
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_recording_killed_under_load_replays_and_reports_to_its_last_interval() {
    if !require_root("a_recording_killed_under_load_replays_and_reports_to_its_last_interval") {
        return;
    }
    let fs = LoopFs::new("ext4", 512);
    let dir = fs.path("out");
    std::fs::create_dir_all(&dir).unwrap();
    let recording = dir.join("killed.rec");
    let mut tool = Command::new(binary())
        .args(["--json", "-d", "0.5", "--procs", "10000", "--record"])
        .arg(&recording)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = tool.stdout.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let first = lines.recv_timeout(Duration::from_secs(30)).unwrap();
    let mut writer = heavy_writes(&fs, "load", 1_000_000);
    thread::sleep(Duration::from_secs(4));
    // As the OOM killer, a crash or a reboot would.
    tool.kill().unwrap();
    tool.wait().unwrap();
    let _ = writer.kill();
    let _ = writer.wait();
    let live: Vec<Value> = std::iter::once(first)
        .chain(std::iter::from_fn(|| {
            lines.recv_timeout(Duration::from_secs(1)).ok()
        }))
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    let (code, replayed, stderr) = replay(&recording);
    assert_eq!(code, Some(0), "{stderr}");
    // The kill may fall between an interval's write and its line, either way round.
    assert!(
        replayed.len().abs_diff(live.len()) <= 1 && live.len() >= 6,
        "{} of {} intervals replayed: {stderr}",
        replayed.len(),
        live.len()
    );
    for (i, (a, b)) in live.iter().zip(&replayed).enumerate() {
        assert_eq!(a, b, "interval {i} differs from the live run");
    }
    assert!(
        replayed
            .iter()
            .any(|i| i["events"]["received"].as_u64() > Some(1_000)),
        "under load"
    );
    assert!(
        stderr.contains("ends at byte") || stderr.contains("cut short at byte"),
        "says where it ends: {stderr}"
    );
    let report = |name: &str| {
        let page = dir.join(name);
        let out = Command::new(binary())
            .arg("report")
            .arg(&recording)
            .arg("-o")
            .arg(&page)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "the report is written: {stderr}");
        (std::fs::read_to_string(&page).unwrap(), stderr)
    };
    let (page, _) = report("killed.html");
    assert!(page.contains("This report ends early"), "a banner");
    // Killed in the middle of a write: the last whole interval, and the byte of the cut.
    let len = std::fs::metadata(&recording).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&recording)
        .unwrap();
    file.set_len(len - 5).unwrap();
    let (code, cut, stderr) = replay(&recording);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        cut.len(),
        replayed.len() - 1,
        "up to the last whole interval"
    );
    let at = format!("cut short at byte {}", len - 5);
    assert!(stderr.contains(&at), "{stderr}");
    let (page, _) = report("cut.html");
    assert!(page.contains(&at), "the banner says where");
    // A bit flipped in the middle is damage, not a cut, and still names its offset.
    let mut bytes = std::fs::read(&recording).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x04;
    std::fs::write(&recording, &bytes).unwrap();
    let (code, damaged, stderr) = replay(&recording);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(damaged.len() < cut.len(), "{} intervals", damaged.len());
    assert!(
        stderr.contains("damaged at byte") && stderr.contains("not cut short"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    let (page, _) = report("damaged.html");
    assert!(page.contains("damaged at byte"), "the banner says where");
    eprintln!(
        "killed: {} intervals live, {} replayed, {len} bytes",
        live.len(),
        replayed.len()
    );
}
