//! `iotop-bpf report` end to end: a real recording of real workloads becomes an HTML page
//! that a real browser (headless Chromium) renders, with its SVG heat maps and findings; the
//! report is made without root.

use std::{os::unix::process::CommandExt as _, path::Path, process::Command};

use iotop_bpf_integration::{JsonRun, LoopFs, require_root, unprivileged_copy, workload};

/// Chromium, headless and offline, on a fresh profile; returns (stdout, stderr).
fn chromium(dir: &Path, args: &[&str], page: &str) -> (String, String) {
    let profile = dir.join(format!("profile-{}", args.len()));
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(page)
        .output()
        .expect("run chromium (installed by `cargo xtask setup`)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn a_recording_becomes_a_page_chromium_renders() {
    if !require_root("a_recording_becomes_a_page_chromium_renders") {
        return;
    }
    let (dir, exe) = unprivileged_copy("report");
    let recording = dir.join("incident.ndjson");
    let fs = LoopFs::new("ext4", 256);
    let run = JsonRun::start(&["--record", recording.to_str().unwrap()]);
    workload(&[
        "small-sync",
        "--dir",
        fs.path("rec").to_str().unwrap(),
        "--count",
        "400",
    ]);
    workload(&["dstate", "--seconds", "6"]);
    std::thread::sleep(std::time::Duration::from_millis(600));
    let live = run.stop();
    assert!(
        live.iter().any(|i| i["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "long_d_state")),
        "the recording has the D-state finding"
    );
    // The report is made by nobody, from a file nobody can read.
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    for (path, mode) in [(&recording, 0o644), (&out_dir, 0o777)] {
        let mut perms = std::fs::metadata(path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, mode);
        std::fs::set_permissions(path, perms).unwrap();
    }
    let html = out_dir.join("report.html");
    let started = std::time::Instant::now();
    let made = Command::new(&exe)
        .arg("report")
        .arg(&recording)
        .arg("-o")
        .arg(&html)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "report as nobody: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    eprintln!(
        "report of {} intervals in {} ms",
        live.len(),
        started.elapsed().as_millis()
    );
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&html).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the report names processes: private");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.to_lowercase().contains("<script"), "no scripts");
    assert!(!page.contains("https://"), "nothing fetched");

    // The browser: the DOM it built, and what it logged (no console errors).
    let url = format!("file://{}", html.display());
    check_dom(&dir, &url);

    // The screenshot is the page, not a blank: a blank page of the same size compresses to
    // next to nothing.
    check_screenshot(&dir, &url);

    // One heat map for slides.
    let svg = out_dir.join("heat.svg");
    let made = Command::new(&exe)
        .args(["report"])
        .arg(&recording)
        .arg("-o")
        .arg(&svg)
        .args(["--disk", &fs.name, "--latency", "device"])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.contains(&format!("{} device time", fs.name)));

    // Bad input: a clear message naming the file.
    check_bad_input(&dir, &exe);
    drop(fs);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The DOM the browser built from the page: the charts, heat maps and findings, and no
/// console error in its log.
fn check_dom(dir: &Path, url: &str) {
    let (dom, log) = chromium(dir, &["--dump-dom"], url);
    for line in log.lines() {
        assert!(
            !line.contains("CONSOLE") && !line.contains("Uncaught"),
            "console error: {line}"
        );
    }
    assert!(dom.contains("<h1>iotop-bpf report:"), "{dom}");
    let svgs = dom.matches("<svg").count();
    assert!(svgs >= 6, "{svgs} SVG charts");
    assert!(dom.contains("device time heat map"), "disk heat maps");
    assert!(dom.contains("queue time heat map"));
    assert!(
        dom.contains("sync call latency heat map"),
        "a process's sync heat map"
    );
    assert!(
        dom.matches("<rect class=\"h").count() > 10,
        "heat map cells"
    );
    for kind in ["write_amplification", "long_d_state"] {
        assert!(dom.contains(kind), "finding {kind} missing");
    }
    assert!(dom.contains("fix:") && dom.contains("why:"));
    assert!(dom.contains("Threads in D state"));
}

/// The screenshot is the page, not a blank: a blank page of the same size compresses to
/// next to nothing.
fn check_screenshot(dir: &Path, url: &str) {
    let shot = dir.join("report.png");
    let blank = dir.join("blank.png");
    std::fs::write(
        dir.join("blank.html"),
        "<!DOCTYPE html><html><body></body></html>",
    )
    .unwrap();
    for (png, page) in [
        (&shot, url.to_string()),
        (
            &blank,
            format!("file://{}", dir.join("blank.html").display()),
        ),
    ] {
        chromium(
            dir,
            &[
                &format!("--screenshot={}", png.display()),
                "--window-size=1400,3000",
            ],
            &page,
        );
    }
    let (shot_png, blank_png) = (
        std::fs::read(&shot).unwrap(),
        std::fs::read(&blank).unwrap(),
    );
    assert_eq!(png_size(&shot_png), (1400, 3000));
    assert!(
        shot_png.len() > 10 * blank_png.len(),
        "the screenshot ({} B) is barely more than a blank page ({} B)",
        shot_png.len(),
        blank_png.len()
    );
}

/// Bad input: a clear message naming the file.
fn check_bad_input(dir: &Path, exe: &Path) {
    let bad = dir.join("bad.ndjson");
    std::fs::write(&bad, "not a recording\n").unwrap();
    let failed = Command::new(exe)
        .arg("report")
        .arg(&bad)
        .args(["-o", "/tmp/never.html"])
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{} is not an iotop-bpf recording", bad.display())),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"));
}
