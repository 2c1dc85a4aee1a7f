//! A private Prometheus on loopback for the exporter's tests (Debian's package), and the
//! plain HTTP they speak to it and to `iotop-bpf serve` (moved out of tests/prometheus.rs to
//! keep it short).

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::Value;

/// A port nobody listens on now (the kernel picks it; the socket is closed again).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A plain HTTP/1.0 GET: (status, headers, body).
pub fn get(port: u16, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{accept}\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {head}"));
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// `query` percent-encoded for a URL.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Now, in seconds since the epoch (Prometheus's time).
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A child process killed (SIGTERM, then waited for) on drop.
pub struct Running {
    pub child: Child,
    pub what: &'static str,
}

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill with the child's own pid.
        unsafe { libc::kill(i32::try_from(self.child.id()).unwrap(), libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            sleep(Duration::from_millis(50));
        }
        eprintln!("{} did not stop on SIGTERM: killing it", self.what);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private Prometheus on loopback scraping one target every second.
pub struct Prometheus {
    port: u16,
    dir: PathBuf,
    _process: Running,
}

impl Prometheus {
    pub fn start(target_port: u16) -> Self {
        let prometheus = Path::new("/usr/bin/prometheus");
        assert!(
            prometheus.exists(),
            "Debian's prometheus package is not installed: run `cargo xtask setup`"
        );
        let dir = std::env::temp_dir().join(format!("iotop-bpf-prometheus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: iotop-bpf\n    static_configs:\n      \
                 - targets: ['127.0.0.1:{target_port}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Self {
            port,
            dir,
            _process: Running {
                child,
                what: "prometheus",
            },
        }
    }

    pub fn api(&self, path: &str) -> Value {
        let (status, _, body) = get(self.port, path, None);
        let value: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{path}: HTTP {status}, not JSON ({e}): {body}"));
        assert_eq!(value["status"], "success", "{path}: {body}");
        value["data"].clone()
    }

    /// An instant query's vector at `time`: (labels, value).
    pub fn query(&self, promql: &str, time: f64) -> Vec<(Value, f64)> {
        let data = self.api(&format!(
            "/api/v1/query?query={}&time={time:.3}",
            encode(promql)
        ));
        data["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let value = r["value"][1].as_str().unwrap().parse().unwrap();
                (r["metric"].clone(), value)
            })
            .collect()
    }

    pub fn scalar(&self, promql: &str, time: f64) -> Option<f64> {
        let result = self.query(promql, time);
        assert!(result.len() <= 1, "{promql}: {result:?}");
        result.first().map(|(_, v)| *v)
    }

    /// Waits (at most 20 s: the first scrape can take 5-8 s) until the target is up.
    pub fn wait_until_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let up = TcpStream::connect(("127.0.0.1", self.port))
                .ok()
                .and_then(|_| self.scalar("up{job=\"iotop-bpf\"}", unix_now()));
            if up == Some(1.0) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the target is not up after 20 s ({up:?}); prometheus log:\n{}",
                std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
            );
            sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
