//! The recorder, on the pipeline's side: it encodes each input as the model gets it, into a
//! batch that closes at each interval's sample (or past 1 MiB), and hands the batch to the
//! writer's thread ([`super::writer`]). It never waits for the disk and never fails the
//! pipeline: recording is never the reason the tool stops.
//!
//! While the writer falls behind, the batches wait in memory, at most [`QUEUE_BOUND`] bytes.
//! Past it, a batch's events are dropped and counted (a gap record says how many, and both
//! sides' tables start over after it) and its samples kept, so the kernel's figures of every
//! interval stay in the file; past twice the bound the recording stops. When a write fails,
//! the writer stops it; the front ends say so ([`Watch`]).

use std::{
    collections::VecDeque,
    ops::Range,
    path::PathBuf,
    sync::{
        Arc,
        atomic::Ordering,
        mpsc::{self, Sender},
    },
    time::Duration,
};

use super::{
    Header,
    codec::{self, Encoder},
    replayer::part_path,
    writer::{Disk, Job, Shared, State, Storage, Writer, head},
};
use crate::model::{Input, KernelSample, SampleKind};

/// Bytes of encoded records that may wait for the writer: about 80 s of a busy host's events
/// (200 kB/s), 3 s of the busiest the probes stream (250,000 requests a second).
pub const QUEUE_BOUND: usize = 16 << 20;
/// A batch closes at each interval, or past this many bytes.
const BATCH_MAX: usize = 1 << 20;
/// Parts of a rotated recording: the newest of them are kept within `--record-max`.
pub const PARTS: u64 = 8;
/// How long the end of a run waits for the writer to write what is queued.
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// Where and how much to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The file, or with `max` the base name of the parts (`FILE.0001`, ...).
    pub path: PathBuf,
    /// `--record-max`: the most the recording may take on disk, kept by rotation.
    pub max: Option<u64>,
}

/// The recorder's status, for the front ends.
#[derive(Clone)]
pub struct Watch(Arc<Shared>);

impl Watch {
    pub fn state(&self) -> State {
        self.0.state()
    }

    /// `stopped at <time>, <reason>`, once the recording stopped.
    pub fn stopped(&self) -> Option<String> {
        let stopped = self.state().stopped?;
        Some(format!(
            "stopped at {}, {}",
            crate::clock::rfc3339(stopped.unix_ms),
            stopped.reason
        ))
    }

    /// What to say at the end of the run when the recording did not keep everything: why it
    /// stopped and what it holds, how many events it left out.
    pub fn exit_line(&self) -> Option<String> {
        let state = self.state();
        let mut said = Vec::new();
        if let Some(stopped) = &state.stopped {
            let holds = state.last_ms.map_or_else(
                || "no whole interval".to_string(),
                |ms| format!("the intervals up to {}", crate::clock::rfc3339(ms)),
            );
            said.push(format!(
                "the recording stopped at {} ({}): {} holds {holds}, and replays",
                crate::clock::rfc3339(stopped.unix_ms),
                stopped.reason,
                crate::names::path(&state.path)
            ));
        }
        if state.dropped > 0 {
            said.push(format!(
                "the recording left out {} events while the disk fell behind (each gap is noted in it)",
                state.dropped
            ));
        }
        (!said.is_empty()).then(|| said.join("; "))
    }
}

/// Writes a recording.
pub struct Recorder {
    header: Header,
    base: PathBuf,
    /// With rotation: the size at which a part is closed.
    part_max: Option<u64>,
    encoder: Encoder,
    batch: Vec<u8>,
    /// Inputs in the batch, and where its samples' records are.
    batch_inputs: u64,
    samples: Vec<Range<usize>>,
    jobs: Option<Sender<Job>>,
    shared: Arc<Shared>,
    done: mpsc::Receiver<()>,
    final_recorded: bool,
    /// [`QUEUE_BOUND`] (smaller in tests).
    bound: usize,
}

impl Recorder {
    /// Creates the file (the first part) and starts the writer.
    pub fn create(options: &Options, header: &Header) -> anyhow::Result<Self> {
        Self::create_on(Box::new(Disk), options, header)
    }

    /// [`Recorder::create`] on any storage (tests: a disk that fills up).
    pub fn create_on(
        mut storage: Box<dyn Storage>,
        options: &Options,
        header: &Header,
    ) -> anyhow::Result<Self> {
        let mut header = header.clone();
        let part_max = options.max.map(|max| (max / PARTS).max(1));
        let path = match part_max {
            Some(_) => {
                header.part = Some(1);
                part_path(&options.path, 1)
            }
            None => options.path.clone(),
        };
        let fail = |e: std::io::Error| {
            anyhow::anyhow!("create the recording {}: {e}", crate::names::path(&path))
        };
        let head = head(&header);
        let mut sink = storage.create(&path).map_err(fail)?;
        sink.write_all(&head).map_err(fail)?;
        let shared = Arc::new(Shared::default());
        if let Ok(mut state) = shared.state.lock() {
            state.path = path.clone();
            state.written = head.len() as u64;
            state.part = header.part.unwrap_or(0);
            state.part_bytes = head.len() as u64;
        }
        let writer = Writer {
            storage,
            sink,
            path,
            good: head.len() as u64,
            closed: VecDeque::new(),
            max_total: options.max,
            part_max: part_max.unwrap_or(u64::MAX),
            shared: Arc::clone(&shared),
        };
        let (jobs, receive) = mpsc::channel();
        let (finished, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("iotop-bpf-rec".into())
            .spawn(move || {
                writer.run(&receive);
                let _ = finished.send(());
            })
            .map_err(|e| anyhow::anyhow!("start the recording's writer: {e}"))?;
        Ok(Self {
            header,
            base: options.path.clone(),
            part_max,
            encoder: Encoder::default(),
            batch: Vec::with_capacity(1 << 16),
            batch_inputs: 0,
            samples: Vec::new(),
            jobs: Some(jobs),
            shared,
            done,
            final_recorded: false,
            bound: QUEUE_BOUND,
        })
    }

    /// A smaller bound, to reach it quickly.
    #[cfg(test)]
    pub fn set_bound(&mut self, bound: usize) {
        self.bound = bound;
    }

    /// Smaller parts, to rotate quickly.
    #[cfg(test)]
    pub fn set_part_max(&mut self, bytes: u64) {
        self.part_max = Some(bytes);
    }

    pub fn watch(&self) -> Watch {
        Watch(Arc::clone(&self.shared))
    }

    /// Records one input (nothing once the recording stopped).
    pub fn input(&mut self, input: &Input) {
        if self.jobs.is_none() {
            return;
        }
        if self.shared.stopped.load(Ordering::Acquire) {
            self.jobs = None;
            return;
        }
        let before = self.batch.len();
        self.encoder.encode(input, &mut self.batch);
        self.batch_inputs += 1;
        match input {
            Input::Sample(sample) => {
                self.samples.push(before..self.batch.len());
                self.final_recorded = sample.kind == SampleKind::Final;
                let closes_ms = self.unix_ms(sample.now_ns);
                self.close(Some(closes_ms));
                self.rotate_if_due(sample);
            }
            _ if self.batch.len() >= BATCH_MAX => self.close(None),
            _ => {}
        }
    }

    fn unix_ms(&self, now_ns: u64) -> u64 {
        self.header.started_unix_ms + now_ns.saturating_sub(self.header.started_ns) / 1_000_000
    }

    /// Hands the batch to the writer, or, while too much waits for it, drops its events.
    fn close(&mut self, closes_ms: Option<u64>) {
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(1 << 16));
        let samples = std::mem::take(&mut self.samples);
        let inputs = std::mem::take(&mut self.batch_inputs);
        let queued = self.shared.queued.load(Ordering::Acquire);
        let records = if queued + batch.len() <= self.bound {
            batch
        } else {
            // The events go, counted; the samples stay (the kernel's figures of the interval).
            let kept: usize = samples.iter().map(ExactSizeIterator::len).sum();
            let dropped = inputs - samples.len() as u64;
            let mut salvage = Vec::with_capacity(kept + 24);
            self.encoder
                .gap(dropped, (batch.len() - kept) as u64, &mut salvage);
            for range in samples {
                salvage.extend_from_slice(&batch[range]);
            }
            if let Ok(mut state) = self.shared.state.lock() {
                state.dropped += dropped;
            }
            if queued + salvage.len() > 2 * self.bound {
                self.stop(format!(
                    "the disk took nothing for too long ({} MiB waiting to be written)",
                    queued >> 20
                ));
                return;
            }
            salvage
        };
        self.send(Job::Frame { records, closes_ms });
    }

    fn send(&mut self, job: Job) {
        let bytes = match &job {
            Job::Frame { records, .. } => records.len(),
            Job::Part { .. } => 0,
        };
        self.shared.queued.fetch_add(bytes, Ordering::AcqRel);
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok());
        if !sent {
            // The writer stopped (it said why).
            self.shared.queued.fetch_sub(bytes, Ordering::AcqRel);
            self.jobs = None;
        }
    }

    fn stop(&mut self, reason: String) {
        self.shared.stop(reason);
        self.jobs = None;
    }

    /// With rotation, once the part reached its size: the part ends, the next begins with
    /// a copy of this sample as its baseline (so that it replays alone too).
    fn rotate_if_due(&mut self, sample: &KernelSample) {
        let Some(part_max) = self.part_max else {
            return;
        };
        // What the writer wrote of the part it is on: once it is on the latest part asked
        // for, and that part is full, the next begins (a part that waited for a slow disk is
        // bigger, never smaller: the parts kept stay within the budget).
        let state = self.shared.state();
        let part = self.header.part.unwrap_or(1);
        if state.part != part || state.part_bytes < part_max || self.jobs.is_none() {
            return;
        }
        let part = part + 1;
        self.header.part = Some(part);
        self.send(Job::Frame {
            records: codec::end_record(true),
            closes_ms: None,
        });
        self.send(Job::Part {
            path: part_path(&self.base, part),
            head: head(&self.header),
        });
        self.encoder.reset();
        let baseline = Input::Sample(Box::new(KernelSample {
            kind: SampleKind::Baseline,
            ..sample.clone()
        }));
        self.encoder.encode(&baseline, &mut self.batch);
        self.batch_inputs = 1;
        self.samples.push(0..self.batch.len());
        self.close(None);
    }
}

impl Drop for Recorder {
    /// Writes what is left and, when the run's final sample was recorded, the end record;
    /// then waits for the writer, a few seconds at most (a disk that hangs does not hold the
    /// tool's exit).
    fn drop(&mut self) {
        if self.jobs.is_some() {
            if !self.batch.is_empty() {
                self.close(None);
            }
            if self.final_recorded {
                self.send(Job::Frame {
                    records: codec::end_record(false),
                    closes_ms: None,
                });
            }
        }
        if self.jobs.take().is_some() {
            let _ = self.done.recv_timeout(FINISH_WAIT);
        } else {
            // Stopped: the writer is gone or going; what it holds is not waited for.
            let _ = self.done.recv_timeout(Duration::from_millis(200));
        }
    }
}
