//! The HTTP side of the exporter: a small hyper 1 server on the tool's own current-thread
//! tokio runtime. `GET /metrics` encodes the last interval (OpenMetrics when the client asks
//! for it, as Prometheus does; the classic text format otherwise); `GET /` is a page linking
//! to it; everything else is 404.

use std::{
    convert::Infallible,
    io::ErrorKind,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode, header, server::conn::http1, service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;

use super::{classic, metrics};

/// The default port: outside the exhausted 9100-9999 exporter range, and not a port that
/// IANA, Debian's /etc/services or a well-known exporter or server uses (10101, an earlier
/// idea, is FeatureBase's and H2O Wave's default).
pub const DEFAULT_PORT: u16 = 10135;
/// `serve`'s default address: loopback only; exposing the metrics is a deliberate choice.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10135";
/// Connections served at once; more are closed at once (a scraper needs one).
const MAX_CONNECTIONS: usize = 64;
/// A client must send its request head within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection is closed after this long, idle keep-alive or not, so none holds a slot
/// forever (Prometheus reconnects).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);

pub const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const CLASSIC_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Parses `--listen`: `IP:PORT`, `[IPv6]:PORT`, `localhost:PORT`, `:PORT` (every interface)
/// or `PORT` (loopback).
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let port = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| format!("{p:?} is not a port number (1-65535)"))
            .and_then(|port| {
                if port == 0 {
                    Err(
                        "port 0 is not a fixed port; Prometheus needs to know where to scrape"
                            .into(),
                    )
                } else {
                    Ok(port)
                }
            })
    };
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return port(&addr.port().to_string()).map(|_| addr);
    }
    if let Some(p) = text.strip_prefix(':') {
        return Ok(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port(p)?)));
    }
    if let Some(p) = text.strip_prefix("localhost:") {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port(p)?)));
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port(text)?)));
    }
    Err(format!(
        "{text:?} is not an address to listen on: use IP:PORT (127.0.0.1:{DEFAULT_PORT}, \
         [::1]:{DEFAULT_PORT}), localhost:PORT, :PORT for every interface, or PORT"
    ))
}

/// Binds the listening socket (before the probes are loaded, so a bad or busy address fails
/// at once, with a message saying what to do).
pub fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let listener = bind_dual_stack(addr).map_err(|e| {
        let why = match e.kind() {
            ErrorKind::AddrInUse => {
                "the address is in use (is another iotop-bpf serve or exporter running?); \
                 pick another with --listen"
                    .to_string()
            }
            ErrorKind::AddrNotAvailable => "it is not an address of this machine".to_string(),
            ErrorKind::PermissionDenied => {
                "ports below 1024 need root or CAP_NET_BIND_SERVICE".to_string()
            }
            _ => e.to_string(),
        };
        anyhow!("cannot listen on {addr}: {why}")
    })?;
    listener
        .set_nonblocking(true)
        .context("make the listening socket non-blocking")?;
    Ok(listener)
}

/// `:PORT` binds `[::]`, which also accepts IPv4 where the host allows dual-stack sockets
/// (Linux's default); a host without IPv6 gets `0.0.0.0` instead.
fn bind_dual_stack(addr: SocketAddr) -> std::io::Result<TcpListener> {
    match TcpListener::bind(addr) {
        Err(e)
            if addr.ip() == Ipv6Addr::UNSPECIFIED
                && (matches!(
                    e.kind(),
                    ErrorKind::AddrNotAvailable | ErrorKind::Unsupported
                ) || e.raw_os_error() == Some(libc::EAFNOSUPPORT)) =>
        {
            TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, addr.port())))
        }
        other => other,
    }
}

/// Serves the registry on the listener, in a task of the current runtime, until the
/// process exits. Returns the address actually bound.
pub fn spawn(listener: TcpListener, registry: Registry) -> Result<SocketAddr> {
    let addr = listener.local_addr().context("the listening address")?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .context("register the listening socket with the runtime")?;
    tokio::spawn(accept_loop(listener, Arc::new(registry)));
    Ok(addr)
}

/// Decrements the open-connection count when a connection's task ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, registry: Arc<Registry>) {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors and the like: wait instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::Relaxed);
            drop(stream);
            continue;
        }
        let slot = Slot(Arc::clone(&open));
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let _slot = slot;
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let response = respond(
                    request.method(),
                    request.uri().path(),
                    accept(&request),
                    &registry,
                );
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            // Errors are the client's (reset, timeout): nothing to report, the tool may be
            // drawing a terminal UI.
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
        });
    }
}

fn accept<B>(request: &Request<B>) -> &str {
    request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Whether an `Accept` header asks for OpenMetrics (with a non-zero quality).
pub fn wants_openmetrics(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        media.eq_ignore_ascii_case("application/openmetrics-text")
            && !parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            })
    })
}

/// The response to one request (pure apart from encoding the registry).
pub fn respond(
    method: &Method,
    path: &str,
    accept: &str,
    registry: &Registry,
) -> Response<Full<Bytes>> {
    let known = matches!(path, "/" | "/metrics");
    if !known {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: the metrics are at /metrics\n".into(),
        );
    }
    if method != Method::GET && method != Method::HEAD {
        let mut response = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "only GET and HEAD\n".into(),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    if path == "/" {
        return reply(StatusCode::OK, "text/html; charset=utf-8", index_page());
    }
    let openmetrics = metrics::openmetrics(registry);
    if wants_openmetrics(accept) {
        return reply(StatusCode::OK, OPENMETRICS_TYPE, openmetrics);
    }
    match classic::from_openmetrics(&openmetrics) {
        Ok(text) => reply(StatusCode::OK, CLASSIC_TYPE, text),
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            format!(
                "cannot write the classic text format ({e}); ask for application/openmetrics-text\n"
            ),
        ),
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

fn index_page() -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>iotop-bpf</title></head>\n\
         <body><h1>iotop-bpf {}</h1>\n\
         <p>Storage I/O of this host, from eBPF: per-disk latency, queue and device time, \
         the busiest workloads, and active findings.</p>\n\
         <p><a href=\"/metrics\">Metrics</a> (OpenMetrics for Prometheus, the classic text \
         format for other clients).</p>\n</body></html>\n",
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        let ok = |t: &str| parse_listen(t).unwrap().to_string();
        assert_eq!(ok("127.0.0.1:10135"), "127.0.0.1:10135");
        assert_eq!(ok("[::1]:9999"), "[::1]:9999");
        assert_eq!(ok("localhost:8080"), "127.0.0.1:8080");
        assert_eq!(ok(":10135"), "[::]:10135");
        assert_eq!(ok("10135"), "127.0.0.1:10135");
        assert_eq!(ok(DEFAULT_LISTEN), format!("127.0.0.1:{DEFAULT_PORT}"));
        for bad in [
            "",
            "foo",
            "1.2.3.4",
            "1.2.3.4:99999",
            ":0",
            "127.0.0.1:0",
            "host:80",
            "::1:80",
        ] {
            let err = parse_listen(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
        assert!(parse_listen(":0").unwrap_err().contains("port 0"));
    }

    #[test]
    fn a_busy_address_is_refused_with_a_clear_message() {
        // Port 0: the kernel picks a free port, which the second bind then finds taken.
        let first = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
        let taken = first.local_addr().unwrap();
        let err = bind(taken).unwrap_err().to_string();
        assert!(err.contains(&format!("cannot listen on {taken}")), "{err}");
        assert!(err.contains("in use") && err.contains("--listen"), "{err}");
        let err = bind("192.0.2.1:10135".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an address of this machine"), "{err}");
    }

    #[test]
    fn accept_headers() {
        // What Prometheus 2.x sends.
        assert!(wants_openmetrics(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(!wants_openmetrics("*/*"));
        assert!(!wants_openmetrics(""));
        assert!(!wants_openmetrics("text/plain;version=0.0.4"));
        assert!(!wants_openmetrics("application/openmetrics-text; q=0"));
        assert!(wants_openmetrics(
            "Application/OpenMetrics-Text; version=1.0.0"
        ));
    }
}
