//! The viewers' wire: how a running tool sends its intervals to `iotop-bpf attach`.
//!
//! A connection starts with the viewer's [`PREAMBLE`] (so a stray client of a TCP port is
//! closed at once), then frames both ways: a 4-byte big-endian length (of what follows), a
//! kind byte, the payload.
//!
//! - viewer -> tool: [`HELLO`] ([`Hello`]: the format version, the token for TCP);
//! - tool -> viewer: [`WELCOME`] ([`Welcome`]: the run's host, kernel and start) or
//!   [`REFUSED`] ([`Refused`]: why, in one line), then one [`INTERVAL`] per closed interval.
//!
//! The handshake is JSON, which any version reads, so a viewer of another version is told
//! so in words; an interval is an 8-byte count of the frames the tool dropped for this
//! viewer, then the [`Interval`] in postcard (compact, and exact for every float, NaN
//! included). Reading checks every length before allocating and never panics: a corrupt
//! frame is an error that names what was wrong.

use anyhow::{Context as _, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt as _};

use crate::{model::Snapshot, pipeline::RunInfo};

/// The format of the frames; a tool and a viewer of different formats refuse each other.
pub const VERSION: u32 = 1;
/// What a viewer sends first.
pub const PREAMBLE: &[u8; 16] = b"iotop-bpf viewer";

pub const HELLO: u8 = 1;
pub const WELCOME: u8 = 2;
pub const REFUSED: u8 = 3;
pub const INTERVAL: u8 = 4;

/// The largest handshake frame.
pub const MAX_HANDSHAKE: usize = 64 << 10;
/// The largest interval frame (a snapshot is bounded by the model's caps: 4,096 processes).
pub const MAX_INTERVAL: usize = 256 << 20;
/// Bytes of an interval frame before its payload: length, kind, the dropped count.
pub const INTERVAL_HEADER: usize = 4 + 1 + 8;

/// The viewer's first frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    /// For TCP (a Unix socket's file permissions decide who may connect).
    pub token: Option<String>,
    /// `iotop-bpf 0.1.0`.
    pub client: String,
}

/// The tool's answer: who it is and what it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    pub version: u32,
    /// `iotop-bpf 0.1.0`.
    pub tool: String,
    pub pid: u32,
    /// `the live view`, `serve`.
    pub front_end: String,
    pub run: RunInfo,
    /// What is degraded (missing tracepoints, hidden symbols), as the tool's status line says.
    pub notes: Vec<String>,
}

/// The tool's answer to a viewer it will not serve.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub version: u32,
    pub reason: String,
}

/// One closed interval, as published.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub snapshot: Snapshot,
}

/// `iotop-bpf 0.1.0`: who speaks, for messages.
pub fn who() -> String {
    format!("iotop-bpf {}", env!("CARGO_PKG_VERSION"))
}

/// A whole frame: length, kind, payload.
pub fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.extend_from_slice(&frame_len(1 + payload.len()).to_be_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    out
}

fn frame_len(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// A handshake message as a frame.
pub fn handshake<T: Serialize>(kind: u8, message: &T) -> Vec<u8> {
    // Plain structs of strings and numbers: serialising them cannot fail.
    frame(kind, &serde_json::to_vec(message).unwrap_or_default())
}

/// The body of an interval frame, encoded once for every viewer.
pub fn encode_interval(snapshot: &Snapshot) -> Result<Vec<u8>> {
    postcard::to_stdvec(&SnapshotRef { snapshot }).context("encode the interval for viewers")
}

/// [`Interval`] without the copy.
#[derive(Serialize)]
struct SnapshotRef<'a> {
    snapshot: &'a Snapshot,
}

/// The header that goes before an interval's body to one viewer: the frame's length and
/// kind, and how many frames the tool dropped for this viewer so far.
pub fn interval_header(body_len: usize, dropped: u64) -> [u8; INTERVAL_HEADER] {
    let mut out = [0u8; INTERVAL_HEADER];
    out[..4].copy_from_slice(&frame_len(1 + 8 + body_len).to_be_bytes());
    out[4] = INTERVAL;
    out[5..].copy_from_slice(&dropped.to_be_bytes());
    out
}

/// An interval frame's payload: (frames dropped for this viewer so far, the interval).
pub fn decode_interval(payload: &[u8]) -> Result<(u64, Interval)> {
    let (dropped, body) = payload
        .split_first_chunk::<8>()
        .ok_or_else(|| anyhow!("a corrupt interval frame ({} bytes)", payload.len()))?;
    let interval = postcard::from_bytes(body)
        .map_err(|e| anyhow!("a corrupt interval frame ({} bytes): {e}", payload.len()))?;
    Ok((u64::from_be_bytes(*dropped), interval))
}

/// Reads one frame of at most `max` bytes: (kind, payload). `Ok(None)` at a clean end of
/// the stream (between frames).
pub async fn read_frame(
    reader: &mut (impl AsyncRead + Unpin),
    max: usize,
) -> Result<Option<(u8, Vec<u8>)>> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
    if len == 0 || len > max {
        bail!("a frame of {len} bytes (at most {max}): not an iotop-bpf viewer stream");
    }
    let mut body = vec![0u8; len];
    reader
        .read_exact(&mut body)
        .await
        .context("the stream ended inside a frame")?;
    let payload = body.split_off(1);
    Ok(Some((body[0], payload)))
}

/// Parses a handshake frame's JSON payload.
pub fn parse<'a, T: Deserialize<'a>>(payload: &'a [u8], what: &str) -> Result<T> {
    serde_json::from_slice(payload).map_err(|e| anyhow!("a corrupt {what}: {e}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::fixtures::{demo_snapshot, sync_kinds_snapshot, throttled_snapshot};

    /// Runs a future to its end on a runtime of its own.
    pub(crate) fn block<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    fn roundtrip(snapshot: Snapshot) {
        let body = encode_interval(&snapshot).unwrap();
        let mut bytes = interval_header(body.len(), 7).to_vec();
        bytes.extend_from_slice(&body);
        let (kind, payload) = block(read_frame(&mut &bytes[..], MAX_INTERVAL))
            .unwrap()
            .unwrap();
        assert_eq!(kind, INTERVAL);
        let (dropped, interval) = decode_interval(&payload).unwrap();
        assert_eq!(dropped, 7);
        assert_eq!(interval.snapshot, snapshot);
    }

    #[test]
    fn snapshots_come_back_exactly() {
        roundtrip(Snapshot::default());
        roundtrip(demo_snapshot());
        roundtrip(throttled_snapshot());
        roundtrip(sync_kinds_snapshot());
        for seq in [1, 45, crate::history::fixtures::INTERVALS] {
            roundtrip(crate::history::fixtures::snapshot_at(seq));
        }
        // Floats that JSON could not carry.
        let mut odd = demo_snapshot();
        odd.disks[0].interval.util_pct = f64::NAN;
        odd.disks[0].interval.queue_size = f64::INFINITY;
        let body = encode_interval(&odd).unwrap();
        let mut payload = 0u64.to_be_bytes().to_vec();
        payload.extend_from_slice(&body);
        let back = decode_interval(&payload).unwrap().1.snapshot;
        assert!(back.disks[0].interval.util_pct.is_nan());
        assert_eq!(back.disks[0].interval.queue_size, f64::INFINITY);
    }

    #[test]
    fn labels_keep_their_text() {
        let snap = sync_kinds_snapshot();
        let body = encode_interval(&snap).unwrap();
        let mut payload = 0u64.to_be_bytes().to_vec();
        payload.extend_from_slice(&body);
        let back = decode_interval(&payload).unwrap().1.snapshot;
        let kinds = |s: &Snapshot| -> Vec<Vec<(String, u64)>> {
            s.procs
                .iter()
                .map(|p| {
                    p.interval
                        .sync
                        .kinds
                        .iter()
                        .map(|(k, n)| ((*k).to_string(), *n))
                        .collect()
                })
                .collect()
        };
        assert!(
            kinds(&snap).iter().any(|k| !k.is_empty()),
            "the fixture has kinds"
        );
        assert_eq!(kinds(&back), kinds(&snap));
        let evidence = |s: &Snapshot| -> Vec<String> {
            s.findings
                .iter()
                .flat_map(|f| f.evidence.iter().map(|(k, _)| (*k).to_string()))
                .collect()
        };
        let demo = demo_snapshot();
        let body = encode_interval(&demo).unwrap();
        let mut payload = 0u64.to_be_bytes().to_vec();
        payload.extend_from_slice(&body);
        let back = decode_interval(&payload).unwrap().1.snapshot;
        assert!(!evidence(&demo).is_empty());
        assert_eq!(evidence(&back), evidence(&demo));
    }

    #[test]
    fn corrupt_frames_are_errors_not_panics() {
        let body = encode_interval(&demo_snapshot()).unwrap();
        let mut payload = 3u64.to_be_bytes().to_vec();
        payload.extend_from_slice(&body);
        // Every truncation, and a byte flipped at many places: an error or a snapshot,
        // never a panic.
        for cut in (0..payload.len()).step_by(7) {
            assert!(decode_interval(&payload[..cut]).is_err(), "cut at {cut}");
        }
        for at in (8..payload.len()).step_by(11) {
            let mut bad = payload.clone();
            bad[at] ^= 0xa5;
            let _ = decode_interval(&bad);
        }
        // Lengths the reader refuses before allocating.
        let read = |bytes: &[u8], max| block(read_frame(&mut &bytes[..], max));
        let huge = [0xff, 0xff, 0xff, 0xff, INTERVAL];
        let err = read(&huge, MAX_INTERVAL).unwrap_err().to_string();
        assert!(err.contains("not an iotop-bpf viewer stream"), "{err}");
        assert!(read(&[0, 0, 0, 0], MAX_INTERVAL).is_err(), "an empty frame");
        let err = read(&[0, 0, 0, 9, INTERVAL, 1], MAX_INTERVAL).unwrap_err();
        assert!(err.to_string().contains("inside a frame"), "{err}");
        assert!(read(&[], MAX_INTERVAL).unwrap().is_none(), "a clean end");
        let err = read(&[0, 1, 0, 1, HELLO], MAX_HANDSHAKE).unwrap_err();
        assert!(
            err.to_string().contains("65537 bytes (at most 65536)"),
            "{err}"
        );
    }

    #[test]
    fn handshakes_are_json_any_version_reads() {
        let refused = Refused {
            version: VERSION + 1,
            reason: "the viewer speaks another format".into(),
        };
        let bytes = handshake(REFUSED, &refused);
        let (kind, payload) = block(read_frame(&mut &bytes[..], MAX_HANDSHAKE))
            .unwrap()
            .unwrap();
        assert_eq!(kind, REFUSED);
        assert_eq!(parse::<Refused>(&payload, "refusal").unwrap(), refused);
        // A later version's welcome with fields this one does not know still reads.
        let text = br#"{"version":2,"tool":"iotop-bpf 9","pid":1,"front_end":"serve","run":{"host":"h","kernel":"k","started_ns":1,"started_unix_ms":2,"interval_ns":3},"notes":[],"new":true}"#;
        let welcome: Welcome = parse(text, "welcome").unwrap();
        assert_eq!(welcome.version, 2);
        let err = parse::<Welcome>(b"{\"version\":", "welcome").unwrap_err();
        assert!(err.to_string().starts_with("a corrupt welcome"), "{err}");
    }
}
