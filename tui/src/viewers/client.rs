//! The viewer's side: which tool to attach to, the handshake, and the intervals it sends.

use std::{
    io::ErrorKind,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Result, anyhow, bail};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};

use super::{
    endpoint::{self, Liveness},
    wire::{self, Hello, Interval, Refused, Welcome},
};

/// The tool must answer the hello within this.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the tool is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Unix(PathBuf),
    /// `HOST:PORT`.
    Tcp(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "{}", path.display()),
            Self::Tcp(addr) => f.write_str(addr),
        }
    }
}

impl Target {
    /// `attach`'s argument: a path (it has a `/`, ends in `.sock` or exists) or `HOST:PORT`;
    /// without one, the one running tool's socket ([`discover`]).
    pub fn parse(arg: Option<&str>) -> Result<Self> {
        let Some(arg) = arg else {
            return discover().map(Self::Unix);
        };
        if arg.contains('/') || arg.ends_with(".sock") || Path::new(arg).exists() {
            return Ok(Self::Unix(PathBuf::from(arg)));
        }
        match arg.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
                Ok(Self::Tcp(arg.to_string()))
            }
            _ => bail!(
                "{arg:?} is neither a socket path nor HOST:PORT (a tool started with \
                 --viewers-listen)"
            ),
        }
    }
}

/// The one running tool's socket in the default places.
pub fn discover() -> Result<PathBuf> {
    let dirs = endpoint::search_dirs();
    let mut live = Vec::new();
    let mut denied = Vec::new();
    for path in dirs.iter().flat_map(|dir| endpoint::sockets_in(dir)) {
        match endpoint::liveness(&path) {
            Liveness::Live => live.push(path),
            Liveness::Denied => denied.push(path),
            Liveness::Stale | Liveness::Other(_) => {}
        }
    }
    match (live.len(), denied.first()) {
        (1, _) => Ok(live.remove(0)),
        (0, Some(path)) => Err(denied_message(path)),
        (0, None) => bail!(
            "no running iotop-bpf publishes for viewers in {}: start one (sudo iotop-bpf, or \
             iotop-bpf serve), or name its socket or address",
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        ),
        _ => bail!(
            "several running iotop-bpf publish for viewers: {}; name one: iotop-bpf attach PATH",
            live.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Why this user may not attach to the socket at `path`, and what to do.
fn denied_message(path: &Path) -> anyhow::Error {
    let how = std::fs::metadata(path).map_or_else(
        |_| String::new(),
        |meta| {
            format!(
                " (mode {:o}, group {})",
                meta.permissions().mode() & 0o777,
                endpoint::group_name(meta.gid())
            )
        },
    );
    anyhow!(
        "may not attach to {}{how}: permission denied; the tool's operator lets a group of \
         yours attach with --viewers-group GROUP",
        path.display()
    )
}

/// A byte stream to the tool.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// An attached connection, after the handshake.
pub struct Connection {
    stream: Box<dyn Stream>,
    pub welcome: Welcome,
}

/// Connects to the tool at `target` and says hello; the message of an error says why it
/// failed in one line (nothing there, permission, a refusal, another version).
pub async fn connect(target: &Target, token: Option<&str>) -> Result<Connection> {
    let mut stream: Box<dyn Stream> = match target {
        Target::Unix(path) => match tokio::net::UnixStream::connect(path).await {
            Ok(stream) => Box::new(stream),
            Err(e) => {
                return Err(match e.kind() {
                    ErrorKind::NotFound => anyhow!(
                        "nothing at {}: no iotop-bpf publishes there (is it running?)",
                        path.display()
                    ),
                    ErrorKind::ConnectionRefused => {
                        anyhow!("{} is left from an iotop-bpf that is gone", path.display())
                    }
                    ErrorKind::PermissionDenied => denied_message(path),
                    _ => anyhow!("cannot connect to {}: {e}", path.display()),
                });
            }
        },
        Target::Tcp(addr) => {
            let stream = tokio::net::TcpStream::connect(addr.as_str())
                .await
                .map_err(|e| anyhow!("cannot reach {addr}: {e}"))?;
            let _ = stream.set_nodelay(true);
            Box::new(stream)
        }
    };
    let hello = Hello {
        version: wire::VERSION,
        token: token.map(str::to_string),
        client: wire::who(),
    };
    let mut first = wire::PREAMBLE.to_vec();
    first.extend_from_slice(&wire::handshake(wire::HELLO, &hello));
    stream
        .write_all(&first)
        .await
        .map_err(|e| anyhow!("{target} hung up: {e}"))?;
    let answer = tokio::time::timeout(
        ANSWER_TIMEOUT,
        wire::read_frame(&mut stream, wire::MAX_HANDSHAKE),
    )
    .await
    .map_err(|_| anyhow!("{target} did not answer: not an iotop-bpf viewer endpoint?"))?;
    let not_ours = || anyhow!("{target} is not an iotop-bpf viewer endpoint");
    match answer.map_err(|_| not_ours())? {
        Some((wire::WELCOME, payload)) => {
            let welcome: Welcome = wire::parse(&payload, "welcome").map_err(|_| not_ours())?;
            if welcome.version != wire::VERSION {
                bail!(
                    "{} at {target} publishes viewer format {}, this {} speaks {}: attach \
                     with the same version",
                    welcome.tool,
                    welcome.version,
                    wire::who(),
                    wire::VERSION
                );
            }
            Ok(Connection { stream, welcome })
        }
        Some((wire::REFUSED, payload)) => {
            let refused: Refused = wire::parse(&payload, "refusal").map_err(|_| not_ours())?;
            bail!("{target} refused this viewer: {}", refused.reason)
        }
        None => bail!("{target} hung up before answering (a tool token or version it refused?)"),
        Some(_) => Err(not_ours()),
    }
}

impl Connection {
    /// The next interval, and how many frames the tool dropped for this viewer so far. An
    /// error when the tool went away (or sent something corrupt).
    pub async fn next(&mut self) -> Result<(u64, Interval)> {
        match wire::read_frame(&mut self.stream, wire::MAX_INTERVAL).await {
            Ok(Some((wire::INTERVAL, payload))) => wire::decode_interval(&payload),
            Ok(Some((kind, _))) => bail!("an unexpected frame (kind {kind})"),
            Ok(None) => bail!("the tool closed the connection (it quit or was stopped)"),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = |arg: &str| Target::parse(Some(arg)).unwrap();
        assert_eq!(
            t("/run/iotop-bpf/1.sock"),
            Target::Unix("/run/iotop-bpf/1.sock".into())
        );
        assert_eq!(t("x.sock"), Target::Unix("x.sock".into()));
        assert_eq!(t("127.0.0.1:10136"), Target::Tcp("127.0.0.1:10136".into()));
        assert_eq!(t("db01:10136"), Target::Tcp("db01:10136".into()));
        assert_eq!(t("[::1]:10136"), Target::Tcp("[::1]:10136".into()));
        for bad in ["db01", "db01:0", "db01:http", ":10136"] {
            let err = Target::parse(Some(bad)).unwrap_err().to_string();
            assert!(
                err.contains("neither a socket path nor HOST:PORT"),
                "{bad}: {err}"
            );
        }
    }
}
