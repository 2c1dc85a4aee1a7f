//! Recordings: the decoded, annotated event stream and the kernel samples, written as JSON
//! lines behind a versioned header, so that `--replay` feeds the same model without root or
//! probes (workshops, post-mortems).

use std::{
    fs::File,
    io::{BufRead, BufReader, BufWriter, Write},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::model::Input;

/// Bumped when an entry changes shape incompatibly. Version 1 files (the same entries, without
/// the baseline and final samples, the exits and the bad-record counts) are still read.
pub const FORMAT_VERSION: u32 = 2;
const OLDEST_READABLE: u32 = 1;
const MAGIC: &str = "iotop-bpf recording";

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
}

#[derive(Debug, Error)]
pub enum RecordingError {
    #[error("cannot open the recording {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the recording {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is empty, not an iotop-bpf recording")]
    Empty { path: PathBuf },
    #[error("{path} is not an iotop-bpf recording (its first line is not the header)")]
    NotARecording { path: PathBuf },
    #[error(
        "{path} is a version {found} recording; this iotop-bpf reads versions {OLDEST_READABLE} to {FORMAT_VERSION}"
    )]
    Version { path: PathBuf, found: u32 },
    #[error("{path}:{line}: corrupt or truncated entry ({reason})")]
    Corrupt {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

pub struct Recorder {
    out: BufWriter<File>,
    path: PathBuf,
}

impl Recorder {
    pub fn create(path: &Path, header: &Header) -> anyhow::Result<Self> {
        let file = File::create(path)
            .map_err(|e| anyhow::anyhow!("create the recording {}: {e}", path.display()))?;
        let mut recorder = Self {
            out: BufWriter::with_capacity(1 << 20, file),
            path: path.to_path_buf(),
        };
        recorder.write(header)?;
        Ok(recorder)
    }

    fn write(&mut self, value: &impl Serialize) -> anyhow::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out
            .write_all(b"\n")
            .map_err(|e| anyhow::anyhow!("write the recording {}: {e}", self.path.display()))
    }

    /// Writes one input; a sample also flushes, so a recording cut short stays readable up
    /// to its last complete interval.
    pub fn input(&mut self, input: &Input) -> anyhow::Result<()> {
        self.write(input)?;
        if matches!(input, Input::Sample(_)) {
            self.out
                .flush()
                .map_err(|e| anyhow::anyhow!("write the recording {}: {e}", self.path.display()))?;
        }
        Ok(())
    }
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
    }
}

pub struct Replayer {
    lines: std::io::Lines<BufReader<File>>,
    path: PathBuf,
    line: usize,
    pub header: Header,
}

impl Replayer {
    pub fn open(path: &Path) -> Result<Self, RecordingError> {
        let file = File::open(path).map_err(|source| RecordingError::Open {
            path: path.into(),
            source,
        })?;
        let mut lines = BufReader::new(file).lines();
        let first = match lines.next() {
            None => return Err(RecordingError::Empty { path: path.into() }),
            Some(Err(source)) => {
                return Err(RecordingError::Read {
                    path: path.into(),
                    source,
                });
            }
            Some(Ok(first)) => first,
        };
        let header: Header = serde_json::from_str(&first)
            .map_err(|_| RecordingError::NotARecording { path: path.into() })?;
        if header.format != MAGIC {
            return Err(RecordingError::NotARecording { path: path.into() });
        }
        if !(OLDEST_READABLE..=FORMAT_VERSION).contains(&header.version) {
            return Err(RecordingError::Version {
                path: path.into(),
                found: header.version,
            });
        }
        Ok(Self {
            lines,
            path: path.into(),
            line: 1,
            header,
        })
    }

    /// The next input; `Ok(None)` at the end.
    pub fn next_input(&mut self) -> Result<Option<Input>, RecordingError> {
        let Some(line) = self.lines.next() else {
            return Ok(None);
        };
        self.line += 1;
        let line = line.map_err(|source| RecordingError::Read {
            path: self.path.clone(),
            source,
        })?;
        serde_json::from_str(&line)
            .map(Some)
            .map_err(|e| RecordingError::Corrupt {
                path: self.path.clone(),
                line: self.line,
                reason: e.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BlockIo, Comm, Dev, KernelSample, Op};

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("iotop-bpf-rec-{}-{name}", std::process::id()))
    }

    fn block() -> Input {
        Input::Block(BlockIo {
            dev: Dev::new(7, 0),
            sector: 8,
            bytes: 4096,
            op: Op::Write,
            flags: 1,
            tgid: 42,
            tid: 43,
            comm: Comm::new("lab001"),
            created_ns: 10,
            issued_ns: 20,
            completed_ns: 90,
            error: 0,
            kernel_thread: false,
        })
    }

    #[test]
    fn entries_round_trip() {
        let path = temp("round-trip");
        let header = new_header(
            "db01".into(),
            "6.18".into(),
            5,
            1_795_305_600_000,
            1_000_000_000,
        );
        let mut recorder = Recorder::create(&path, &header).unwrap();
        recorder.input(&block()).unwrap();
        recorder
            .input(&Input::Sample(Box::new(KernelSample {
                now_ns: 1_000,
                ..KernelSample::default()
            })))
            .unwrap();
        drop(recorder);
        let mut replay = Replayer::open(&path).unwrap();
        assert_eq!(replay.header, header);
        assert_eq!(replay.next_input().unwrap(), Some(block()));
        assert!(
            matches!(replay.next_input().unwrap(), Some(Input::Sample(s)) if s.now_ns == 1_000)
        );
        assert_eq!(replay.next_input().unwrap(), None);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn bad_files_get_clear_errors() {
        let path = temp("bad");
        assert!(matches!(
            Replayer::open(&path),
            Err(RecordingError::Open { .. })
        ));
        std::fs::write(&path, "").unwrap();
        assert!(matches!(
            Replayer::open(&path),
            Err(RecordingError::Empty { .. })
        ));
        std::fs::write(&path, "\u{0}\u{1}garbage\n").unwrap();
        assert!(matches!(
            Replayer::open(&path),
            Err(RecordingError::NotARecording { .. })
        ));
        let mut header =
            serde_json::to_string(&new_header("h".into(), "k".into(), 0, 0, 1)).unwrap();
        std::fs::write(
            &path,
            header.replace(r#""version":2"#, r#""version":99"#) + "\n",
        )
        .unwrap();
        assert!(matches!(
            Replayer::open(&path),
            Err(RecordingError::Version { found: 99, .. })
        ));
        header.push_str("\n{\"block\": {\"dev\": 3}}\n");
        std::fs::write(&path, header).unwrap();
        let mut replay = Replayer::open(&path).unwrap();
        let err = replay.next_input().unwrap_err().to_string();
        assert!(err.contains(":2: corrupt or truncated entry"), "{err}");
        std::fs::remove_file(path).unwrap();
    }
}
