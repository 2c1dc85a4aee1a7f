//! The recording: the model's inputs (decoded, annotated records, bad-record counts and kernel
//! samples) written to a file in the order the model applies them, and read back as a source
//! of the same inputs, so that `--replay` and the `report` command feed the same model without
//! root or probes and give back exactly the reports of the live run. The pipeline records and
//! replays through it ([`Recorder`], [`Replayer`]); the live feed does not know it.
//!
//! A file (format 5, the one written) is the bytes `IOTOPBPF`, a little-endian `u32` length,
//! the JSON [`Header`], then zstd frames, each with its checksum, each holding the
//! length-prefixed binary records of one interval, or of 1 MiB of it: ~10 bytes per block
//! request on disk. The stream ends with a record that says so. Files are created 0600: they
//! hold other processes' names and file paths.
//!
//! - `codec.rs`: an input to a record and back, and the records the recorder adds about the
//!   stream itself (a gap, a stop, the end);
//! - `recorder.rs`: on the pipeline's side, each input encoded into a batch that closes at
//!   each interval's sample, handed to the writer, never waited for; its state read by the
//!   front ends through a [`Watch`];
//! - `writer.rs`: a thread of its own that compresses each batch into one frame and writes it
//!   with one `write`, so a slow or failing disk never holds the tool and a recording cut
//!   short replays to its last whole interval;
//! - `reader.rs`: one file read to wherever it ends, a cut (the file ends inside its last
//!   write) told from damage in the middle;
//! - `replayer.rs`: one file, or the parts of a rotated one (`--record-max`: `FILE.0001`,
//!   `FILE.0002`, ...), read as one stream, what stopped a file short kept as [`Note`]s.
//!
//! Older files still read: formats 3 and 4 are one zstd frame flushed at each interval,
//! formats 1 and 2 JSON lines, the header first.

mod codec;
mod reader;
mod recorder;
mod replayer;
mod writer;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[cfg(test)]
use reader::Mark;
pub use recorder::{Options, Recorder, Watch};
pub use replayer::{Note, Replayer};

/// Bumped when the encoding changes incompatibly. Versions 1 to 4 are read.
/// 4: block requests carry their cgroup and, for write-back, their dirtier.
/// 5: one checksummed zstd frame per interval; gap, stop and end records; parts.
pub const FORMAT_VERSION: u32 = 5;
const OLDEST_READABLE: u32 = 1;
const MAGIC: &str = "iotop-bpf recording";
/// The first bytes of a binary recording (format 3 on).
const BINARY_MAGIC: &[u8; 8] = b"IOTOPBPF";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    pub host: String,
    pub kernel: String,
    /// `CLOCK_MONOTONIC` when the probes were attached, and the wall clock then.
    pub started_ns: u64,
    pub started_unix_ms: u64,
    pub interval_ns: u64,
    /// The part's number, from 1, in a rotated recording (`--record-max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<u32>,
}

/// Why a recording cannot be read at all. A path is quoted as every message quotes one
/// (`crate::names::path`); the cause is part of the message, not a chained source.
#[derive(Debug, Error)]
pub enum RecordingError {
    #[error("cannot open the recording {}: {error}", shown(path))]
    Open {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot read the recording {}: {error}", shown(path))]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} is empty, not an iotop-bpf recording", shown(path))]
    Empty { path: PathBuf },
    #[error(
        "{} is not an iotop-bpf recording (it does not start with one's header)",
        shown(path)
    )]
    NotARecording { path: PathBuf },
    #[error(
        "{} is a version {found} recording; this iotop-bpf reads versions {OLDEST_READABLE} to {FORMAT_VERSION}",
        shown(path)
    )]
    Version { path: PathBuf, found: u32 },
    #[error(
        "{}: corrupt or truncated at byte {offset} of the file: {reason}",
        shown(path)
    )]
    CorruptAt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("no recording given")]
    NoFile,
    #[error(
        "{} is not a part of a rotated recording: replay it alone",
        shown(path)
    )]
    NotAPart { path: PathBuf },
    #[error(
        "{} and {} are parts of different recordings: replay them apart",
        shown(path),
        shown(other)
    )]
    OtherRun { path: PathBuf, other: PathBuf },
    #[error("{} is part {part} again: give each part once", shown(path))]
    PartTwice { path: PathBuf, part: u32 },
}

fn shown(path: &Path) -> std::borrow::Cow<'_, str> {
    crate::names::path(path)
}

fn check_header(path: &Path, header: Option<Header>) -> Result<Header, RecordingError> {
    let header = header
        .filter(|h| h.format == MAGIC)
        .ok_or_else(|| RecordingError::NotARecording { path: path.into() })?;
    if !(OLDEST_READABLE..=FORMAT_VERSION).contains(&header.version) {
        return Err(RecordingError::Version {
            path: path.into(),
            found: header.version,
        });
    }
    Ok(header)
}

pub fn new_header(
    host: String,
    kernel: String,
    started_ns: u64,
    started_unix_ms: u64,
    interval_ns: u64,
) -> Header {
    Header {
        format: MAGIC.to_string(),
        version: FORMAT_VERSION,
        host,
        kernel,
        started_ns,
        started_unix_ms,
        interval_ns,
        part: None,
    }
}

#[cfg(test)]
mod tests;
