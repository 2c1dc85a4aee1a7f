//! Names can't take over a terminal: a process that names itself with escape sequences and a
//! file whose name holds ESC, BEL, a newline and a byte that is not UTF-8 leave no raw control
//! byte in `--batch`, the `w` capture, the report, `check` or an error message; JSON keeps
//! the exact characters, escaped.

use std::{
    ffi::{CString, OsStr},
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use iotop_bpf_integration::{LoopFs, binary, require_root, sh, tmux::Tmux};
use serde_json::Value;

/// What a local user may name a process: it would set the terminal's title.
const COMM: &str = "\u{1b}]2;PWNED\u{7}z";
/// It shown, as `ps` would.
const COMM_SHOWN: &str = "\\x1b]2;PWNED\\x07z";
/// A file name that would clear the screen, ring, break a line, and is not UTF-8.
const FILE: &[u8] = b"a\x1b[2J\x07\n\xff.log";

/// A child process named [`COMM`] that writes 128 bytes to `file` and fsyncs them, every
/// 2 ms, for `seconds` (a write-amplification finding names it and its file).
fn hostile_writer(file: &Path, seconds: u64) -> libc::pid_t {
    let name = CString::new(COMM).unwrap();
    let path = CString::new(file.as_os_str().as_bytes()).unwrap();
    // SAFETY: the child makes system calls only (no allocation, no lock) and exits with
    // _exit; the strings were made before the fork.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0);
            let fd = libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                0o644,
            );
            if fd < 0 {
                libc::_exit(2);
            }
            let record = [b'x'; 128];
            for _ in 0..seconds * 500 {
                libc::write(fd, record.as_ptr().cast(), record.len());
                libc::fsync(fd);
                libc::usleep(2_000);
            }
            libc::_exit(0);
        }
        pid
    }
}

/// Bytes that act on a terminal: C0 controls but TAB and LF (`grep -P
/// '[\x00-\x08\x0b-\x1f\x7f]'`), and C1 controls written in UTF-8.
fn raw_controls(bytes: &[u8]) -> Vec<(usize, u8)> {
    let mut found: Vec<(usize, u8)> = bytes
        .iter()
        .enumerate()
        .filter(|&(_, &b)| matches!(b, 0x00..=0x08 | 0x0b..=0x1f | 0x7f))
        .map(|(i, &b)| (i, b))
        .collect();
    found.extend(
        bytes
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[0] == 0xc2 && (0x80..=0x9f).contains(&w[1]))
            .map(|(i, w)| (i, w[1])),
    );
    found
}

fn assert_clean(what: &str, bytes: &[u8]) {
    let found = raw_controls(bytes);
    assert!(
        found.is_empty(),
        "{what}: raw control bytes {:?}:\n{}",
        &found[..found.len().min(10)],
        String::from_utf8_lossy(bytes)
    );
}

fn run(args: &[&OsStr]) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

/// Every string in `value`.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        Value::Object(o) => o.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn hostile_names_leave_no_raw_control_byte_in_any_text_output() {
    if !require_root("hostile_names_leave_no_raw_control_byte_in_any_text_output") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let file = fs.mountpoint.join(OsStr::from_bytes(FILE));
    let writer = hostile_writer(&file, 60);
    std::thread::sleep(Duration::from_millis(300));

    // --batch: the name shown, its file too.
    let batch = run(&["--batch", "-d", "0.5", "-n", "6"].map(OsStr::new));
    assert!(batch.status.success());
    assert_clean("--batch", &batch.stdout);
    let text = String::from_utf8_lossy(&batch.stdout);
    assert!(text.contains(COMM_SHOWN), "{text}");
    assert!(
        text.contains("a\\x1b[2J\\x07\\x0a"),
        "the file, shown: {text}"
    );

    // JSON: the exact characters, escaped.
    let json = run(&["--json", "-d", "0.5", "-n", "4", "--procs", "10000"].map(OsStr::new));
    assert_clean("--json", &json.stdout);
    let raw = String::from_utf8_lossy(&json.stdout);
    assert!(raw.contains(r#""comm":"\u001b]2;PWNED\u0007z""#), "{raw}");
    let mut all = Vec::new();
    for line in raw.lines() {
        strings(&serde_json::from_str(line).unwrap(), &mut all);
    }
    assert!(all.iter().any(|s| s == COMM), "the comm, exactly");
    let exact = format!("{}/a\u{1b}[2J\u{7}\n\u{fffd}.log", fs.mountpoint.display());
    assert!(
        all.iter().any(|s| s == &exact),
        "the file, exactly (the byte that is not UTF-8 as U+FFFD): {raw}"
    );

    // The report of a recording made meanwhile.
    let dir = fs.path("out");
    std::fs::create_dir_all(&dir).unwrap();
    let recording = dir.join("hostile.rec");
    let recorded = run(&[
        OsStr::new("--json"),
        OsStr::new("-d"),
        OsStr::new("0.5"),
        OsStr::new("-n"),
        OsStr::new("4"),
        OsStr::new("--record"),
        recording.as_os_str(),
    ]);
    assert!(recorded.status.success());
    let page = dir.join("hostile.html");
    let report = run(&[
        OsStr::new("report"),
        recording.as_os_str(),
        OsStr::new("-o"),
        page.as_os_str(),
    ]);
    assert!(report.status.success());
    let html = std::fs::read(&page).unwrap();
    assert_clean("the report", &html);
    assert!(String::from_utf8_lossy(&html).contains("PWNED"));

    // `check`, while the name is about.
    let check = run(&[OsStr::new("check")]);
    assert!(check.status.success());
    assert_clean("check", &check.stdout);

    errors_show_the_paths_they_quote();
    the_live_view_and_its_capture_show_the_name(&dir);

    // SAFETY: kill and reap our own child.
    unsafe {
        libc::kill(writer, libc::SIGKILL);
        libc::waitpid(writer, std::ptr::null_mut(), 0);
    }
}

/// Error messages that quote a path show it as names are shown, on one line.
fn errors_show_the_paths_they_quote() {
    let hostile_path = PathBuf::from(OsStr::from_bytes(b"/nonexistent/\x1b]2;PWNED\x07\xff"));
    for args in [
        vec![
            OsStr::new("--replay"),
            hostile_path.as_os_str(),
            OsStr::new("--json"),
        ],
        vec![
            OsStr::new("report"),
            hostile_path.as_os_str(),
            OsStr::new("-o"),
            OsStr::new("/tmp/x.html"),
        ],
        vec![
            OsStr::new("--json"),
            OsStr::new("-n"),
            OsStr::new("1"),
            OsStr::new("--record"),
            hostile_path.as_os_str(),
        ],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_clean(&format!("the error of {args:?}"), &out.stderr);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("\\x1b]2;PWNED\\x07\\xff"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

/// The live view and its `w` capture; the terminal's title stays its own.
fn the_live_view_and_its_capture_show_the_name(dir: &std::path::Path) {
    let capture_dir = dir.join("captures");
    std::fs::create_dir_all(&capture_dir).unwrap();
    let tmux = Tmux::start_sized(
        "names",
        (160, 40),
        &format!(
            "cd {} && {} -d 0.5; echo EXIT=$?; sleep 120",
            capture_dir.display(),
            binary().display()
        ),
    );
    let title = || {
        sh(
            "tmux",
            &["display", "-p", "-t", &tmux.session, "#{pane_title}"],
        )
    };
    let screen = tmux.wait_for("PWNED");
    assert!(screen.contains("\\x1b]2;PWNED"), "{screen}");
    tmux.keys("w");
    tmux.wait_for("saved ");
    tmux.keys("q");
    tmux.wait_for("EXIT=0");
    assert!(!title().contains("PWNED"), "the pane's title was set");
    let mut captured = 0;
    for entry in std::fs::read_dir(&capture_dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert_clean(&path.display().to_string(), &bytes);
        assert!(
            String::from_utf8_lossy(&bytes).contains("PWNED"),
            "{}",
            path.display()
        );
        captured += 1;
    }
    assert_eq!(captured, 2, "the .txt and the .md");
}
