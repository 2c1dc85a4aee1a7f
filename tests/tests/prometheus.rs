//! The exporter against the real thing: `iotop-bpf serve` scraped by a private Prometheus
//! (Debian's package) while fio runs on a loop device; the counters are checked against the
//! kernel's /proc/diskstats, PromQL must compute a latency quantile from the buckets, the
//! exposition must be accepted by Prometheus (OpenMetrics) and by `promtool check metrics`
//! (classic text), and 5000 differently named processes doing I/O must not blow up the
//! number of series.

use std::{
    ffi::CString,
    io::Write as _,
    net::TcpStream,
    path::Path,
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use iotop_bpf_integration::{
    LoopFs, binary,
    prometheus::{Prometheus, Running, free_port, get, unix_now},
    require_root, sh,
};
use serde_json::Value;

/// Requests completed by a device (reads, writes, discards, flushes) per /proc/diskstats.
fn diskstats_requests(name: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap();
    let fields: Vec<u64> = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(name))
        .unwrap_or_else(|| panic!("{name} is not in /proc/diskstats"))
        .split_whitespace()
        .skip(3)
        .map(|f| f.parse().unwrap())
        .collect();
    // reads, writes, discards and flushes completed (fields 1, 5, 12 and 16).
    fields[0] + fields[4] + fields.get(11).unwrap_or(&0) + fields.get(15).unwrap_or(&0)
}

/// Waits until the device has been idle for `quiet` (no request completed), up to 15 s.
fn wait_until_idle(name: &str, quiet: Duration) -> u64 {
    sh("sync", &[]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = diskstats_requests(name);
    let mut since = Instant::now();
    loop {
        sleep(Duration::from_millis(100));
        let now = diskstats_requests(name);
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= quiet {
            return now;
        }
        assert!(Instant::now() < deadline, "{name} never went idle");
    }
}

fn serve(port: u16) -> Running {
    let child = Command::new(binary())
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "-d",
            "0.5",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start iotop-bpf serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "iotop-bpf serve is not listening"
        );
        sleep(Duration::from_millis(100));
    }
    Running {
        child,
        what: "iotop-bpf serve",
    }
}

/// `sum(series)` for the loop device, once Prometheus has scraped an interval that ended
/// after the device went idle (and it is still idle).
fn settled_total(prom: &Prometheus, promql: &str, device: &str, idle_requests: u64) -> (f64, f64) {
    // One interval (0.5 s) to close after the idle point, one scrape (1 s) to see it.
    sleep(Duration::from_millis(2_500));
    assert_eq!(
        diskstats_requests(device),
        idle_requests,
        "{device} was not idle while Prometheus caught up"
    );
    let at = unix_now();
    (prom.scalar(promql, at).unwrap_or(0.0), at)
}

#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn prometheus_scrapes_exact_disk_counters_and_latency_buckets() {
    if !require_root("prometheus_scrapes_exact_disk_counters_and_latency_buckets") {
        return;
    }
    let started = Instant::now();
    let port = free_port();
    let _serve = serve(port);
    let fs = LoopFs::new("ext4", 256);
    let prom = Prometheus::start(port);
    prom.wait_until_up();
    eprintln!("target up after {:.1}s", started.elapsed().as_secs_f64());

    // The exposition: the page, 404s, content negotiation, and promtool on classic text.
    check_exposition(port);

    let device = fs.name.as_str();
    let requests = format!("sum(iotop_bpf_disk_requests_total{{device=\"{device}\"}})");
    let idle = wait_until_idle(device, Duration::from_millis(1_500));
    let (before, t0) = settled_total(&prom, &requests, device, idle);

    // Random 4 KiB direct reads and writes with an fsync every 32 writes: reads, writes,
    // journal writes and cache flushes.
    run_fio(&fs);
    let done = wait_until_idle(device, Duration::from_millis(1_500));
    let (after, t1) = settled_total(&prom, &requests, device, done);

    let kernel = done - idle;
    let scraped = after - before;
    #[expect(clippy::cast_precision_loss, reason = "request counts")]
    let error = (scraped - kernel as f64).abs() / kernel as f64;
    eprintln!(
        "{device}: diskstats delta {kernel}, PromQL delta {scraped} ({:.3}%)",
        error * 100.0
    );
    assert!(kernel >= 2_048, "fio's 2048 requests at least: {kernel}");
    assert!(error <= 0.02, "PromQL {scraped} vs diskstats {kernel}");

    let window = (t1 - t0).ceil() as u64 + 1;
    let p99 = prom
        .scalar(
            &format!(
                "histogram_quantile(0.99, sum by (le) (rate(iotop_bpf_disk_latency_seconds_bucket{{device=\"{device}\"}}[{window}s])))"
            ),
            t1,
        )
        .expect("histogram_quantile returned nothing");
    eprintln!("{device}: p99 latency {p99} s");
    assert!(p99.is_finite() && p99 > 0.0 && p99 < 10.0, "p99 {p99}");
    let fio_bytes = prom
        .scalar("sum(iotop_bpf_workload_bytes_total{comm=\"fio\"})", t1)
        .unwrap_or(0.0);
    assert!(fio_bytes > 0.0, "fio has a workload series with its bytes");

    // Every query of the shipped Grafana dashboard is valid PromQL over these metrics, and
    // the disk and workload panels have data.
    check_dashboard(&prom, device, window, t1);

    // Prometheus scraped every time without an error, and parsed OpenMetrics: the unit
    // metadata exists only in that format.
    check_scrapes(&prom, t1);

    // 5000 differently named short-lived processes, each one direct write: the series
    // stay bounded.
    check_series_bounded(&fs, port, &prom, device);
    eprintln!("test took {:.1}s", started.elapsed().as_secs_f64());
}

/// The exposition: the page, 404s, content negotiation (OpenMetrics when asked, the classic
/// text else), and promtool's check of the classic text.
fn check_exposition(port: u16) {
    let (status, _, page) = get(port, "/", None);
    assert!(
        status == 200 && page.contains("href=\"/metrics\""),
        "{page}"
    );
    assert_eq!(get(port, "/nope", None).0, 404);
    let (status, headers, openmetrics) = get(
        port,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(status, 200);
    assert!(
        headers.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{headers}"
    );
    assert!(openmetrics.ends_with("# EOF\n"));
    let (_, headers, classic) = get(port, "/metrics", None);
    assert!(
        headers.contains("content-type: text/plain; version=0.0.4"),
        "{headers}"
    );
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool (Debian's prometheus package)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(classic.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// Random 4 KiB direct reads and writes with an fsync every 32 writes: reads, writes,
/// journal writes and cache flushes.
fn run_fio(fs: &LoopFs) {
    let fio = Command::new("fio")
        .args([
            "--name=exporter",
            "--rw=randrw",
            "--bs=4k",
            "--size=16M",
            // Two seconds, four intervals of `serve -d 0.5`: a comm's series starts the
            // interval after it joins the top (that one goes to "other"), so a fio done
            // within one interval would have no bytes of its own.
            "--time_based",
            "--runtime=2",
            "--direct=1",
            "--ioengine=psync",
            "--fsync=32",
            "--output-format=terse",
        ])
        .arg(format!("--filename={}", fs.path("fio.dat").display()))
        .output()
        .expect("run fio");
    assert!(
        fio.status.success(),
        "fio: {}",
        String::from_utf8_lossy(&fio.stderr)
    );
}

/// Every query of the shipped Grafana dashboard, over `window` seconds to `t1`: valid, and
/// with data for the disk and workload panels.
fn check_dashboard(prom: &Prometheus, device: &str, window: u64, t1: f64) {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/grafana/iotop-bpf.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", &format!("{window}s"))
                .replace("$instance", ".*")
                .replace("$device", device);
            let result = prom.query(&expr, t1);
            queries += 1;
            let title = panel["title"].as_str().unwrap();
            let must_have_data = [
                "Latency heat map",
                "Queue vs device",
                "Requests",
                "Throughput",
                "Top workloads",
            ]
            .iter()
            .any(|t| title.starts_with(t));
            assert!(
                !must_have_data || !result.is_empty(),
                "{title}: {expr} returned nothing"
            );
        }
    }
    assert!(queries >= 15, "{queries} dashboard queries");
}

/// Prometheus scraped every time without an error and parsed OpenMetrics, and stored the
/// samples by `t1`.
fn check_scrapes(prom: &Prometheus, t1: f64) {
    let targets = prom.api("/api/v1/targets");
    let target = &targets["activeTargets"][0];
    assert_eq!(target["health"], "up", "{target}");
    assert_eq!(target["lastError"], "", "{target}");
    let metadata = prom.api("/api/v1/metadata?metric=iotop_bpf_disk_latency_seconds");
    assert_eq!(
        metadata["iotop_bpf_disk_latency_seconds"][0]["unit"], "seconds",
        "{metadata}"
    );
    assert!(
        prom.scalar("sum(scrape_samples_scraped{job=\"iotop-bpf\"}) > 0", t1)
            .is_some(),
        "Prometheus stored the scraped samples"
    );
}

/// 5000 differently named short-lived processes, each one direct write: the series exposed
/// and stored stay bounded, the names beyond the top folded into other.
fn check_series_bounded(fs: &LoopFs, port: u16, prom: &Prometheus, device: &str) {
    let file = fs.path("names.dat");
    std::fs::write(&file, vec![0u8; 4096 * 64]).unwrap();
    let t2 = unix_now();
    spawn_named_writers(&file, 5_000);
    wait_until_idle(device, Duration::from_millis(1_000));
    sleep(Duration::from_millis(2_500));
    let t3 = unix_now();
    let (_, _, exposition) = get(port, "/metrics", None);
    let series = exposition.lines().filter(|l| !l.starts_with('#')).count();
    let stored = prom.scalar("count({job=\"iotop-bpf\"})", t3).unwrap_or(0.0);
    let named = prom
        .scalar(
            "count(count by (comm) (iotop_bpf_workload_requests_total))",
            t3,
        )
        .unwrap_or(0.0);
    let folded = prom
        .scalar(
            &format!(
                "max_over_time(iotop_bpf_exporter_folded_workloads[{}s])",
                (t3 - t2).ceil() as u64 + 1
            ),
            t3,
        )
        .unwrap_or(0.0);
    eprintln!(
        "after 5000 named processes: {series} series exposed, {stored} in Prometheus, {named} comm values, up to {folded} names folded per interval"
    );
    assert!(series < 2_000, "{series} series");
    assert!(stored < 2_000.0, "{stored} series in Prometheus");
    assert!(named <= 21.0, "{named} comm values: top 20 and other");
    assert!(folded > 20.0, "the names were folded into other: {folded}");
}

/// Forks `n` children; each names itself `w-<i>` (prctl, so no exec resets it), writes one
/// 4 KiB block of `file` with O_DIRECT and exits.
fn spawn_named_writers(file: &Path, n: u32) {
    let path = CString::new(file.to_str().unwrap()).unwrap();
    let names: Vec<CString> = (0..n)
        .map(|i| CString::new(format!("w-{i}")).unwrap())
        .collect();
    let mut buffer: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: posix_memalign with a valid out pointer, a power-of-two alignment.
    assert_eq!(unsafe { libc::posix_memalign(&mut buffer, 4096, 4096) }, 0);
    // SAFETY: buffer holds 4096 bytes.
    unsafe { std::ptr::write_bytes(buffer.cast::<u8>(), 0x5a, 4096) };
    let mut children = Vec::new();
    for (i, name) in names.iter().enumerate() {
        // SAFETY: the child only makes system calls (prctl, open, pwrite, _exit) on memory
        // prepared before the fork, which is safe in a multi-threaded parent.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: see above.
            unsafe {
                libc::prctl(libc::PR_SET_NAME, name.as_ptr());
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_DIRECT);
                let offset = (i % 64) as i64 * 4096;
                let ok = fd >= 0 && libc::pwrite(fd, buffer, 4096, offset) == 4096;
                libc::_exit(i32::from(!ok));
            }
        }
        children.push(pid);
        // Reap as we go so at most a few hundred exist at once.
        if children.len() >= 256 {
            reap(&mut children);
        }
    }
    reap(&mut children);
    // SAFETY: allocated by posix_memalign above.
    unsafe { libc::free(buffer) };
}

fn reap(children: &mut Vec<i32>) {
    for pid in children.drain(..) {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "a writer failed: status {status}"
        );
    }
}

/// `--listen` beside `--json`: the reports go on, the metrics are served; a second exporter
/// on the same address is refused with a message, not a panic.
#[test]
#[ignore = "needs root: run with `cargo xtask test`"]
fn listen_beside_json_and_a_busy_address_is_refused() {
    if !require_root("listen_beside_json_and_a_busy_address_is_refused") {
        return;
    }
    let port = free_port();
    let json = Command::new(binary())
        .args([
            "--json",
            "-d",
            "0.5",
            "-n",
            "4",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start iotop-bpf --json --listen");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "not listening");
        sleep(Duration::from_millis(100));
    }
    sleep(Duration::from_millis(700));
    let (status, _, body) = get(port, "/metrics", None);
    assert_eq!(status, 200);
    assert!(body.contains("iotop_bpf_intervals_total "), "{body}");

    let busy = Command::new(binary())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&busy.stderr);
    assert_eq!(busy.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on 127.0.0.1:{port}")) && stderr.contains("in use"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let bad = Command::new(binary())
        .args(["serve", "--listen", "localhost"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not an address to listen on"));

    let out = json.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(reports, 4, "the JSON reports went on");
}
