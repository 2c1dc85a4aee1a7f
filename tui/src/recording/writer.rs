//! The recording's writer: a thread of its own, so that a slow or failing disk never holds
//! the pipeline (the live view, `serve`, the batch reports). It compresses each batch of
//! records it is given into one zstd frame with its checksum and writes it with one
//! `write`, so a crash of the tool loses at most the frame it was writing, and a reader
//! checks each frame whole.
//!
//! When a write fails (the disk is full, read-only, over quota, or failing), the writer cuts
//! the file back to the end of its last whole frame, tries to add a frame that says why it
//! stopped, and stops: what it wrote stays replayable. It never retries: a disk that failed
//! once in an incident is not written to again behind the operator's back.

use std::{
    collections::VecDeque,
    fs::OpenOptions,
    io,
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc::Receiver,
    },
};

use super::codec;

/// zstd's level. Measured at 200k records/s here: level 3 wrote 10.0 B/event for 7.6% of a
/// core (the whole tool), level 1 10.6 B/event for 5.4%.
const ZSTD_LEVEL: i32 = 1;

/// Where parts are written (files; in tests, a disk that fills up).
pub trait Storage: Send {
    /// Creates (or empties) `path`, readable by its owner only.
    fn create(&mut self, path: &Path) -> io::Result<Box<dyn Sink>>;
    fn remove(&mut self, path: &Path) -> io::Result<()>;
}

/// One part being written.
pub trait Sink: Send {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Cuts the part back to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
}

/// Files on disk.
pub struct Disk;

impl Storage for Disk {
    fn create(&mut self, path: &Path) -> io::Result<Box<dyn Sink>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        // An existing file keeps its mode through `create`: make it private too (it holds
        // other processes' names and file paths).
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        Ok(Box::new(file))
    }

    fn remove(&mut self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
}

impl Sink for std::fs::File {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        io::Write::write_all(self, bytes)
    }

    /// Cut back, and the next write goes at the new end (not after a hole where the cut
    /// bytes were).
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)?;
        io::Seek::seek(self, io::SeekFrom::Start(len)).map(drop)
    }
}

/// What the writer is asked to do, in order.
pub enum Job {
    /// Records to write as one frame; `closes_ms`: the wall-clock end of the interval they
    /// close, if they close one.
    Frame {
        records: Vec<u8>,
        closes_ms: Option<u64>,
    },
    /// Close the current part and start the next at `path` with `head` (magic, header).
    Part { path: PathBuf, head: Vec<u8> },
}

/// Why the recording stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stopped {
    pub unix_ms: u64,
    pub reason: String,
}

/// What the recorder and the front ends know of the writer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// The part being written.
    pub path: PathBuf,
    /// Bytes written, over every part.
    pub written: u64,
    /// The part being written (from 1; 0 without rotation), and its bytes.
    pub part: u32,
    pub part_bytes: u64,
    /// The wall-clock end of the last interval whole on disk.
    pub last_ms: Option<u64>,
    pub stopped: Option<Stopped>,
    /// Inputs the recorder dropped while the writer fell behind.
    pub dropped: u64,
}

/// Shared between the recorder, the writer and the front ends.
#[derive(Default)]
pub struct Shared {
    /// Bytes of records handed to the writer and not yet written.
    pub queued: AtomicUsize,
    pub stopped: AtomicBool,
    pub state: Mutex<State>,
}

impl Shared {
    pub fn state(&self) -> State {
        self.state.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Records why the recording stopped (the first reason only).
    pub fn stop(&self, reason: String) {
        if let Ok(mut state) = self.state.lock()
            && state.stopped.is_none()
        {
            state.stopped = Some(Stopped {
                unix_ms: crate::clock::unix_ms_now(),
                reason,
            });
        }
        self.stopped.store(true, Ordering::Release);
    }
}

/// The writer thread's state.
pub struct Writer {
    pub storage: Box<dyn Storage>,
    pub sink: Box<dyn Sink>,
    pub path: PathBuf,
    /// Bytes of the current part that are whole frames (and its head).
    pub good: u64,
    /// Parts closed (rotation), oldest first, with their sizes.
    pub closed: VecDeque<(PathBuf, u64)>,
    /// With rotation: the most every part together may take.
    pub max_total: Option<u64>,
    pub part_max: u64,
    pub shared: Arc<Shared>,
}

impl Writer {
    /// Writes what it is given until the recorder goes away or a write fails.
    pub fn run(mut self, jobs: &Receiver<Job>) {
        let Ok(mut zstd) = zstd::bulk::Compressor::new(ZSTD_LEVEL) else {
            self.shared.stop("cannot start zstd".to_string());
            return;
        };
        if zstd
            .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
            .is_err()
        {
            self.shared.stop("cannot start zstd".to_string());
            return;
        }
        while let Ok(job) = jobs.recv() {
            let result = match job {
                Job::Frame { records, closes_ms } => {
                    let result = self.frame(&mut zstd, &records, closes_ms);
                    self.shared
                        .queued
                        .fetch_sub(records.len(), Ordering::AcqRel);
                    result
                }
                Job::Part { path, head } => self.part(&mut zstd, path, &head),
            };
            if let Err(reason) = result {
                self.shared.stop(reason);
                return;
            }
        }
    }

    fn frame(
        &mut self,
        zstd: &mut zstd::bulk::Compressor<'_>,
        records: &[u8],
        closes_ms: Option<u64>,
    ) -> Result<(), String> {
        let frame = zstd
            .compress(records)
            .map_err(|e| format!("compress the recording: {e}"))?;
        if let Err(e) = self.sink.write_all(&frame) {
            let reason = format!("write {}: {e}", crate::names::path(&self.path));
            self.fail(zstd, &reason);
            return Err(reason);
        }
        self.good += frame.len() as u64;
        if let Ok(mut state) = self.shared.state.lock() {
            state.written += frame.len() as u64;
            state.part_bytes = self.good;
            if closes_ms.is_some() {
                state.last_ms = closes_ms;
            }
        }
        Ok(())
    }

    /// After a failed write: the part cut back to its whole frames, then a frame that says
    /// why, if it fits.
    fn fail(&mut self, zstd: &mut zstd::bulk::Compressor<'_>, reason: &str) {
        let _ = self.sink.truncate(self.good);
        let stop = codec::stop_record(crate::clock::unix_ms_now(), reason);
        if let Ok(frame) = zstd.compress(&stop)
            && self.sink.write_all(&frame).is_err()
        {
            let _ = self.sink.truncate(self.good);
        }
    }

    /// The next part: the current one closed, the oldest removed while the parts would take
    /// more than their budget.
    fn part(
        &mut self,
        zstd: &mut zstd::bulk::Compressor<'_>,
        path: PathBuf,
        head: &[u8],
    ) -> Result<(), String> {
        let created = self.storage.create(&path).and_then(|mut sink| {
            sink.write_all(head)?;
            Ok(sink)
        });
        let sink = match created {
            Ok(sink) => sink,
            Err(e) => {
                // The part before says why nothing follows it.
                let reason = format!("create {}: {e}", crate::names::path(&path));
                let _ = self.storage.remove(&path);
                self.fail(zstd, &reason);
                return Err(reason);
            }
        };
        let old = std::mem::replace(&mut self.path, path.clone());
        self.closed.push_back((old, self.good));
        self.sink = sink;
        self.good = head.len() as u64;
        if let Some(max) = self.max_total {
            let mut total: u64 = self.closed.iter().map(|(_, n)| n).sum();
            while total + self.part_max > max
                && let Some((oldest, bytes)) = self.closed.pop_front()
            {
                let _ = self.storage.remove(&oldest);
                total -= bytes;
            }
        }
        if let Ok(mut state) = self.shared.state.lock() {
            state.path = path;
            state.written += head.len() as u64;
            state.part += 1;
            state.part_bytes = self.good;
        }
        Ok(())
    }
}

/// The first bytes of a recording file: the magic, the header's length, the header.
pub fn head(header: &super::Header) -> Vec<u8> {
    let json = serde_json::to_vec(header).unwrap_or_default();
    let mut out = Vec::with_capacity(json.len() + 12);
    out.extend_from_slice(super::BINARY_MAGIC);
    out.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&json);
    out
}
