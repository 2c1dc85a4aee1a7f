//! Recordings: the model's inputs (decoded, annotated records, bad-record counts and kernel
//! samples), so that `--replay` feeds the same model without root or probes (workshops,
//! post-mortems) and gives back exactly the reports of the live run.
//!
//! Format 3 (written): the bytes `IOTOPBPF`, a little-endian `u32` length, the JSON header,
//! then a zstd stream of length-prefixed binary records (`codec.rs`): ~10 bytes per block
//! request on disk. The stream is flushed at each interval, so a recording cut short stays
//! readable up to its last complete interval. The file is created 0600: it holds other
//! processes' names and file paths.
//!
//! Formats 1 and 2 (read): JSON lines, the header first (`jsonl.rs`).

mod codec;

use std::{
    fs::{File, OpenOptions},
    io::{BufRead, BufReader, BufWriter, Read, Write},
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::model::Input;

/// Bumped when the encoding changes incompatibly. Versions 1 and 2 (JSON lines) are read.
/// 4: block requests carry their cgroup and, for write-back, their dirtier.
pub const FORMAT_VERSION: u32 = 4;
const OLDEST_READABLE: u32 = 1;
const MAGIC: &str = "iotop-bpf recording";
/// The first bytes of a binary recording (format 3 on).
const BINARY_MAGIC: &[u8; 8] = b"IOTOPBPF";
/// zstd's level. Measured at 200k records/s here: level 3 wrote 10.0 B/event for 7.6% of a
/// core (the whole tool), level 1 10.6 B/event for 5.4%.
const ZSTD_LEVEL: i32 = 1;

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
    #[error("{path} is not an iotop-bpf recording (it does not start with one's header)")]
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
    #[error(
        "{path}: corrupt or truncated at byte {offset} of the file (record {record}): {reason}"
    )]
    CorruptAt {
        path: PathBuf,
        offset: u64,
        record: u64,
        reason: String,
    },
}

/// Writes a recording.
pub struct Recorder {
    out: zstd::stream::write::Encoder<'static, BufWriter<File>>,
    encoder: codec::Encoder,
    buf: Vec<u8>,
    path: PathBuf,
    /// Inputs written, and bytes before compression (for the bench's bytes per event).
    pub inputs: u64,
}

impl Recorder {
    pub fn create(path: &Path, header: &Header) -> anyhow::Result<Self> {
        let fail =
            |e: std::io::Error| anyhow::anyhow!("create the recording {}: {e}", path.display());
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(fail)?;
        // An existing file keeps its mode through `create`: make it private too.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(fail)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let header = serde_json::to_vec(header)?;
        out.write_all(BINARY_MAGIC).map_err(fail)?;
        out.write_all(&u32::try_from(header.len())?.to_le_bytes())
            .map_err(fail)?;
        out.write_all(&header).map_err(fail)?;
        let mut out = zstd::stream::write::Encoder::new(out, ZSTD_LEVEL).map_err(fail)?;
        out.include_checksum(true).map_err(fail)?;
        Ok(Self {
            out,
            encoder: codec::Encoder::default(),
            buf: Vec::with_capacity(1 << 16),
            path: path.to_path_buf(),
            inputs: 0,
        })
    }

    /// Writes one input; a sample also flushes, so a recording cut short stays readable up
    /// to its last complete interval.
    pub fn input(&mut self, input: &Input) -> anyhow::Result<()> {
        self.buf.clear();
        self.encoder.encode(input, &mut self.buf);
        self.inputs += 1;
        let fail =
            |e: std::io::Error| anyhow::anyhow!("write the recording {}: {e}", self.path.display());
        self.out.write_all(&self.buf).map_err(fail)?;
        if matches!(input, Input::Sample(_)) {
            self.out.flush().map_err(fail)?;
            self.out.get_mut().flush().map_err(fail)?;
        }
        Ok(())
    }
}

impl Drop for Recorder {
    /// Ends the zstd frame (a recording that was never finished still reads up to its last
    /// flushed interval).
    fn drop(&mut self) {
        let _ = self.out.do_finish();
        let _ = self.out.get_mut().flush();
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

/// Counts the bytes read from the file, to say where a corrupt recording goes wrong.
struct Counted<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

enum Body {
    Lines {
        lines: std::io::Lines<BufReader<File>>,
        line: usize,
    },
    Binary {
        stream: zstd::stream::read::Decoder<'static, BufReader<Counted<File>>>,
        decoder: codec::Decoder,
        buf: Vec<u8>,
        start: usize,
        /// The stream ended (cleanly or not).
        eof: bool,
        records: u64,
        header_len: u64,
    },
}

/// Reads a recording, one input at a time.
pub struct Replayer {
    body: Body,
    path: PathBuf,
    pub header: Header,
}

impl Replayer {
    pub fn open(path: &Path) -> Result<Self, RecordingError> {
        let open_err = |source| RecordingError::Open {
            path: path.into(),
            source,
        };
        let read_err = |source| RecordingError::Read {
            path: path.into(),
            source,
        };
        let mut file = File::open(path).map_err(open_err)?;
        let mut magic = [0u8; 8];
        let mut got = 0;
        while got < magic.len() {
            match file.read(&mut magic[got..]).map_err(read_err)? {
                0 => break,
                n => got += n,
            }
        }
        if got == 0 {
            return Err(RecordingError::Empty { path: path.into() });
        }
        if got == magic.len() && &magic == BINARY_MAGIC {
            return Self::open_binary(path, file);
        }
        // JSON lines (formats 1 and 2): read again from the start.
        let file = File::open(path).map_err(open_err)?;
        let mut lines = BufReader::new(file).lines();
        let first = match lines.next() {
            None => return Err(RecordingError::Empty { path: path.into() }),
            Some(Err(_)) => return Err(RecordingError::NotARecording { path: path.into() }),
            Some(Ok(first)) => first,
        };
        let header = Self::check_header(path, serde_json::from_str(&first).ok())?;
        Ok(Self {
            body: Body::Lines { lines, line: 1 },
            path: path.into(),
            header,
        })
    }

    fn open_binary(path: &Path, mut file: File) -> Result<Self, RecordingError> {
        let truncated = || RecordingError::CorruptAt {
            path: path.into(),
            offset: 8,
            record: 0,
            reason: "the header is cut short".to_string(),
        };
        let mut len = [0u8; 4];
        file.read_exact(&mut len).map_err(|_| truncated())?;
        let len = u32::from_le_bytes(len);
        if len > 1 << 20 {
            return Err(RecordingError::NotARecording { path: path.into() });
        }
        let mut header = vec![0u8; len as usize];
        file.read_exact(&mut header).map_err(|_| truncated())?;
        let header = Self::check_header(path, serde_json::from_slice(&header).ok())?;
        let header_len = 12 + u64::from(len);
        let stream = zstd::stream::read::Decoder::new(Counted {
            inner: file,
            read: header_len,
        })
        .map_err(|source| RecordingError::Read {
            path: path.into(),
            source,
        })?;
        Ok(Self {
            body: Body::Binary {
                stream,
                decoder: codec::Decoder::default(),
                buf: Vec::with_capacity(1 << 16),
                start: 0,
                eof: false,
                records: 0,
                header_len,
            },
            path: path.into(),
            header,
        })
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

    /// The next input; `Ok(None)` at the end.
    pub fn next_input(&mut self) -> Result<Option<Input>, RecordingError> {
        match &mut self.body {
            Body::Lines { lines, line } => {
                let Some(text) = lines.next() else {
                    return Ok(None);
                };
                *line += 1;
                let text = text.map_err(|source| RecordingError::Read {
                    path: self.path.clone(),
                    source,
                })?;
                serde_json::from_str(&text)
                    .map(Some)
                    .map_err(|e| RecordingError::Corrupt {
                        path: self.path.clone(),
                        line: *line,
                        reason: e.to_string(),
                    })
            }
            Body::Binary {
                stream,
                decoder,
                buf,
                start,
                eof,
                records,
                header_len,
            } => loop {
                if let Some((kind, payload, used)) = codec::split(&buf[*start..]) {
                    *start += used;
                    *records += 1;
                    let corrupt = |reason: String| RecordingError::CorruptAt {
                        path: self.path.clone(),
                        offset: stream.get_ref().get_ref().read,
                        record: *records,
                        reason,
                    };
                    match decoder.decode(kind, payload).map_err(corrupt)? {
                        Some(input) => return Ok(Some(input)),
                        None => continue,
                    }
                }
                if *eof {
                    if *start < buf.len() {
                        return Err(RecordingError::CorruptAt {
                            path: self.path.clone(),
                            offset: stream.get_ref().get_ref().read,
                            record: *records + 1,
                            reason: "the last record is cut short".to_string(),
                        });
                    }
                    return Ok(None);
                }
                // Refill: keep the unread tail, read the next chunk.
                buf.drain(..*start);
                *start = 0;
                let mut chunk = [0u8; 1 << 16];
                match stream.read(&mut chunk) {
                    Ok(0) => *eof = true,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    Err(e) => {
                        let offset = stream.get_ref().get_ref().read.max(*header_len);
                        return Err(RecordingError::CorruptAt {
                            path: self.path.clone(),
                            offset,
                            record: *records + 1,
                            reason: format!("the compressed stream is damaged or cut short ({e})"),
                        });
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::model::{BlockIo, Comm, CpuJiffies, Dev, HostSample, KernelSample, LoadAvg, Op};

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
            cgroup: 0,
            dirtier: None,
            file: None,
        })
    }

    fn sample(now_ns: u64) -> Input {
        Input::Sample(Box::new(KernelSample {
            now_ns,
            ..KernelSample::default()
        }))
    }

    fn header() -> Header {
        new_header(
            "db01".into(),
            "6.18".into(),
            5,
            1_795_305_600_000,
            1_000_000_000,
        )
    }

    #[test]
    fn inputs_round_trip_through_a_private_file() {
        let path = temp("round-trip");
        let mut recorder = Recorder::create(&path, &header()).unwrap();
        recorder.input(&block()).unwrap();
        recorder.input(&Input::BadRecords(3)).unwrap();
        recorder.input(&sample(1_000)).unwrap();
        let with_host = Input::Sample(Box::new(KernelSample {
            now_ns: 2_000,
            host: HostSample {
                load: Some(LoadAvg {
                    one_hundredths: 210,
                    five_hundredths: 150,
                    fifteen_hundredths: 80,
                }),
                procs_blocked: Some(1),
                cpu: Some(CpuJiffies {
                    iowait: 28_391,
                    ..CpuJiffies::default()
                }),
                psi_io_full_avg10_hundredths: Some(302),
                dirty_bytes: Some(40 << 20),
                ..HostSample::default()
            },
            ..KernelSample::default()
        }));
        recorder.input(&with_host).unwrap();
        drop(recorder);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "it holds other processes' names and paths");
        let mut replay = Replayer::open(&path).unwrap();
        assert_eq!(replay.header, header());
        assert_eq!(replay.next_input().unwrap(), Some(block()));
        assert_eq!(replay.next_input().unwrap(), Some(Input::BadRecords(3)));
        assert_eq!(replay.next_input().unwrap(), Some(sample(1_000)));
        assert_eq!(replay.next_input().unwrap(), Some(with_host));
        assert_eq!(replay.next_input().unwrap(), None);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_recording_cut_short_reads_up_to_its_last_interval_then_names_the_offset() {
        let path = temp("cut");
        let mut recorder = Recorder::create(&path, &header()).unwrap();
        for i in 0..1_000 {
            recorder.input(&block()).unwrap();
            if i % 100 == 99 {
                recorder.input(&sample(i)).unwrap();
            }
        }
        // Killed without finishing: no frame end, and a partial last block.
        std::mem::forget(recorder);
        let len = std::fs::metadata(&path).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(len - 7).unwrap();
        let mut replay = Replayer::open(&path).unwrap();
        let mut samples = 0;
        let err = loop {
            match replay.next_input() {
                Ok(Some(Input::Sample(_))) => samples += 1,
                Ok(Some(_)) => {}
                Ok(None) => panic!("a cut recording read to its end"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(samples >= 9, "{samples} intervals read before the cut");
        assert!(err.contains("corrupt or truncated at byte"), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn version_1_json_lines_still_replay() {
        let path = temp("v1");
        let v1 = concat!(
            r#"{"format":"iotop-bpf recording","version":1,"host":"h","kernel":"k","started_ns":0,"started_unix_ms":0,"interval_ns":1000000000}"#,
            "\n",
            r#"{"block":{"dev":{"major":7,"minor":0},"sector":8,"bytes":4096,"op":"Write","flags":1,"tgid":42,"pid":43,"comm":"lab001","created_ns":10,"issued_ns":20,"completed_ns":90,"error":0,"kernel_thread":false}}"#,
            "\n",
            r#"{"sample":{"now_ns":1000,"counters":{"ring_dropped":0,"complete_without_start":0,"issue_without_start":0,"read_failed":0,"in_flight_evicted":0},"disks":[],"diskstats":[],"logical_writes":[],"dstate_now":[],"dstate_time":[],"names":[]}}"#,
            "\n"
        );
        std::fs::write(&path, v1).unwrap();
        let mut replay = Replayer::open(&path).unwrap();
        assert_eq!(replay.header.version, 1);
        assert_eq!(
            replay.next_input().unwrap(),
            Some(block()),
            "pid read as the thread id"
        );
        assert!(
            matches!(replay.next_input().unwrap(), Some(Input::Sample(s)) if s.now_ns == 1_000 && s.host == HostSample::default()),
            "recorded before the host figures: none of them"
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
        header = header.replace(&format!(r#""version":{FORMAT_VERSION}"#), r#""version":1"#);
        std::fs::write(
            &path,
            header.replace(r#""version":1"#, r#""version":99"#) + "\n",
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
