//! The pipeline the commands (`front/`) drive: a `Source` of model inputs (the live probes,
//! or a recording), the model, and the optional recorder. The live view, the batch reports,
//! `serve`, the offline report and the demo call [`Pipeline::next`] in their loops and get
//! one closed interval at a time; none knows where the inputs come from.
//!
//! Every input reaches the model through here, and, when recording, the recorder sees the
//! very same sequence: the baseline sample taken at start, each drain's records and
//! bad-record count, each interval's sample, and the final sample that settles everything
//! on quit. A replay of the file therefore reproduces the live run's reports exactly.
//!
//! The live view, `serve` and `--batch`/`--json` drive it with one loop, [`drive`], which
//! finishes it however the loop stops (a signal, `q`, the reader gone): the last, partial
//! interval is closed with the final sample, recorded and given to the taps.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use iotop_bpf_probe::privilege::Environment;
use tokio::time::{Instant, Interval, MissedTickBehavior, interval, interval_at};

use crate::{
    feed::LiveFeed,
    model::{Aggregator, Input, SampleKind, Settings, Snapshot},
    recording::{self, Header, Note, Recorder, Replayer, Watch},
};

/// How often the ring buffer is drained between reports.
pub const DRAIN_EVERY: Duration = Duration::from_millis(50);
/// Records taken per drain before the loop looks at signals and timers again.
pub const MAX_BATCH: usize = 65_536;

/// What a run is: where, when, how often. The report's timestamps come from it (and a
/// viewer's header: it is sent to `attach`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunInfo {
    pub host: String,
    pub kernel: String,
    /// `CLOCK_MONOTONIC` when the probes were attached, and the wall clock then.
    pub started_ns: u64,
    pub started_unix_ms: u64,
    pub interval_ns: u64,
}

impl RunInfo {
    /// Wall-clock time of a snapshot (for the reports' `ts`).
    pub fn unix_ms(&self, snap: &Snapshot) -> u64 {
        self.started_unix_ms + snap.elapsed_ns / 1_000_000
    }
}

/// One step of the pipeline.
pub enum Step<A = std::convert::Infallible> {
    /// An interval closed.
    Interval(Box<Snapshot>),
    /// Something else the source says, for the front end alone (an attached viewer's link:
    /// the run it shows, the link's state). A pipeline says nothing else.
    Aside(A),
    /// The source ended: a recording's end, an attached viewer's link task gone (never the
    /// live probes).
    End,
}

pub struct Pipeline {
    source: Source,
    model: Aggregator,
    recorder: Option<Recorder>,
    info: RunInfo,
    /// Called with every closed interval before the front end gets it (the exporter).
    taps: Vec<Tap>,
    /// The final sample was applied (at `-n`, or by [`Pipeline::finish`]): nothing is left to
    /// finish.
    finished: bool,
}

/// A consumer of closed intervals besides the front end.
type Tap = Box<dyn FnMut(&Snapshot)>;

enum Source {
    Live(Box<Live>),
    Replay(Box<Replay>),
}

struct Live {
    feed: LiveFeed,
    reports: Interval,
    drains: Interval,
    /// Intervals still to report before the final one (`-n`), if limited.
    remaining: Option<u64>,
}

struct Replay {
    replayer: Replayer,
    /// Replay at the recorded pace times this; `None`: as fast as it can be read.
    speed: Option<f64>,
    next_at: Instant,
    held: bool,
}

/// The host's name, for the status bar and the recording's header.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Pipeline {
    /// Attaches the probes, takes the baseline and opens the recording (if `record`). Must
    /// run inside a tokio runtime. With `iterations`, the last interval is the final one.
    pub fn live(
        env: &Environment,
        every: Duration,
        iterations: Option<u64>,
        record: Option<&recording::Options>,
    ) -> Result<Self> {
        let feed = LiveFeed::start(env)?;
        let info = RunInfo {
            host: host_name(),
            kernel: env.kernel_release.clone(),
            started_ns: feed.started_ns(),
            started_unix_ms: crate::clock::unix_ms_now(),
            interval_ns: u64::try_from(every.as_nanos()).unwrap_or(u64::MAX),
        };
        let recorder = record
            .map(|options| Recorder::create(options, &header(&info)))
            .transpose()?;
        let mut reports = interval_at(Instant::now() + every, every);
        reports.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut drains = interval(DRAIN_EVERY);
        drains.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut pipeline = Self {
            model: Aggregator::new(Settings::default(), info.started_ns),
            source: Source::Live(Box::new(Live {
                feed,
                reports,
                drains,
                remaining: iterations,
            })),
            recorder,
            info,
            taps: Vec::new(),
            finished: false,
        };
        let baseline = pipeline.live_feed().sample(SampleKind::Baseline);
        pipeline.apply(Input::Sample(Box::new(baseline)));
        // Loading parsed the kernel's BTF and symbols (tens of MB, freed by now): give the
        // pages back, so the resident size is what the run needs.
        crate::heap::trim();
        Ok(pipeline)
    }

    /// Opens a recording (one file, or the parts of a rotated one). `speed`: replay at the
    /// recorded pace times this; `None`: as fast as it can be read (the headless reports).
    pub fn replay(paths: &[PathBuf], speed: Option<f64>) -> Result<Self> {
        let replayer = Replayer::open(paths)?;
        let h = &replayer.header;
        let info = RunInfo {
            host: h.host.clone(),
            kernel: h.kernel.clone(),
            started_ns: h.started_ns,
            started_unix_ms: h.started_unix_ms,
            interval_ns: h.interval_ns,
        };
        Ok(Self {
            model: Aggregator::new(Settings::default(), info.started_ns),
            source: Source::Replay(Box::new(Replay {
                replayer,
                speed,
                next_at: Instant::now(),
                held: false,
            })),
            recorder: None,
            info,
            taps: Vec::new(),
            finished: false,
        })
    }

    pub fn info(&self) -> &RunInfo {
        &self.info
    }

    /// The recorder's status, when recording.
    pub fn recording(&self) -> Option<Watch> {
        self.recorder.as_ref().map(Recorder::watch)
    }

    /// What a replay met: where a file stopped short or was damaged, the recorder's gaps and
    /// stop (all of it once the replay ended).
    pub fn replay_notes(&self) -> &[Note] {
        match &self.source {
            Source::Replay(replay) => replay.replayer.notes(),
            Source::Live(_) => &[],
        }
    }

    /// Notes on what is degraded (missing tracepoints, hidden symbols), for the status line.
    pub fn notes(&self) -> Vec<String> {
        match &self.source {
            Source::Live(live) => live.feed.report().degraded.clone(),
            Source::Replay(_) => Vec::new(),
        }
    }

    /// Stops (or restarts) a paced replay's clock; nothing for the live probes, which keep
    /// counting while the view is paused.
    pub fn hold(&mut self, held: bool) {
        if let Source::Replay(replay) = &mut self.source {
            if replay.held && !held {
                replay.next_at = Instant::now();
            }
            replay.held = held;
        }
    }

    /// Calls `tap` with every interval closed from now on, before the front end gets it.
    pub fn tap(&mut self, tap: impl FnMut(&Snapshot) + 'static) {
        self.taps.push(Box::new(tap));
    }

    fn notify(&mut self, snap: &Snapshot) {
        for tap in &mut self.taps {
            tap(snap);
        }
    }

    /// Waits for and returns the next closed interval. Cancel-safe: every await point is a
    /// timer tick or a readiness wait, and the work between them is done before the next
    /// (the taps run after the last await).
    pub async fn next(&mut self) -> Result<Step> {
        let step = self.next_step().await?;
        if let Step::Interval(snap) = &step {
            self.notify(snap);
        }
        Ok(step)
    }

    async fn next_step(&mut self) -> Result<Step> {
        loop {
            match &mut self.source {
                Source::Live(live) => {
                    tokio::select! {
                        biased;
                        _ = live.reports.tick() => {
                            let kind = match &mut live.remaining {
                                Some(1) => SampleKind::Final,
                                Some(n) => {
                                    *n = n.saturating_sub(1);
                                    SampleKind::Interval
                                }
                                None => SampleKind::Interval,
                            };
                            self.finished |= kind == SampleKind::Final;
                            return self.close(kind).map(Step::Interval);
                        }
                        filling = live.feed.filling() => {
                            filling.context("wait for the ring buffer")?;
                            self.drain();
                        }
                        _ = live.drains.tick() => self.drain(),
                    }
                }
                Source::Replay(replay) => {
                    if replay.speed.is_some() {
                        if replay.held {
                            std::future::pending::<()>().await;
                        }
                        tokio::time::sleep_until(replay.next_at).await;
                    }
                    let Some(input) = replay.replayer.next_input() else {
                        return Ok(Step::End);
                    };
                    if let Some(snap) = self.model.apply(&input) {
                        if let Source::Replay(replay) = &mut self.source
                            && let Some(speed) = replay.speed
                        {
                            replay.next_at = Instant::now()
                                + Duration::from_nanos(snap.interval_ns).div_f64(speed);
                        }
                        return Ok(Step::Interval(Box::new(snap)));
                    }
                }
            }
        }
    }

    /// The last interval, cut short (quit, SIGINT): every pending charge is settled first.
    /// `None` for a replay, whose recording holds its own last interval, and once the final
    /// sample was applied (`-n`, or a finish before).
    pub fn finish(&mut self) -> Result<Option<Box<Snapshot>>> {
        if self.finished {
            return Ok(None);
        }
        self.finished = true;
        let last = match self.source {
            Source::Live(_) => self.close(SampleKind::Final).map(Some),
            Source::Replay(_) => Ok(None),
        }?;
        if let Some(snap) = &last {
            self.notify(snap);
        }
        Ok(last)
    }

    fn live_feed(&mut self) -> &mut LiveFeed {
        match &mut self.source {
            Source::Live(live) => &mut live.feed,
            Source::Replay(_) => unreachable!("only live pipelines sample the kernel"),
        }
    }

    /// Drains the ring buffer, then samples the kernel and closes the interval.
    fn close(&mut self, kind: SampleKind) -> Result<Box<Snapshot>> {
        self.drain();
        let sample = self.live_feed().sample(kind);
        let snap = self.apply(Input::Sample(Box::new(sample)));
        // What a burst of short-lived processes needed is freed once they are reported, but
        // the allocator keeps the pages: give them back. Measured: ~0.08 ms an interval when
        // idle, 1-9 ms during 30,000 processes in 16 s.
        crate::heap::trim();
        Ok(Box::new(snap.unwrap_or_else(|| {
            unreachable!("an interval or final sample closes an interval")
        })))
    }

    /// Empties the ring buffer into the model (and the recording).
    fn drain(&mut self) {
        let Self {
            source,
            model,
            recorder,
            ..
        } = self;
        let Source::Live(live) = source else {
            return;
        };
        let mut sink = |input: Input| {
            if let Some(recorder) = recorder.as_mut() {
                recorder.input(&input);
            }
            model.apply(&input);
        };
        loop {
            let (taken, bad) = live.feed.drain(MAX_BATCH, &mut sink);
            if bad > 0 {
                sink(Input::BadRecords(bad));
            }
            if taken < MAX_BATCH {
                break;
            }
        }
    }

    /// Applies one input and records it (the recorder never fails the pipeline: a write
    /// that fails stops the recording, and the front ends say so).
    fn apply(&mut self, input: Input) -> Option<Snapshot> {
        if let Some(recorder) = &mut self.recorder {
            recorder.input(&input);
        }
        self.model.apply(&input)
    }
}

/// Whether a front end's loop goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// A front end that [`drive`] runs: the live view (over a pipeline, or over an attached
/// viewer's link, whose asides are `A`), `serve`, `--batch` and `--json`.
pub trait Front<A = std::convert::Infallible> {
    /// Waits for what may stop the loop besides the pipeline: a signal, and the live view's
    /// keys and captions (which it takes in itself, then says `Continue`). Cancel-safe: the
    /// loop waits for the pipeline beside it.
    fn other(&mut self) -> impl Future<Output = Result<Flow>>;
    /// An interval closed.
    fn interval(&mut self, snap: Box<Snapshot>) -> Result<Flow>;
    /// The source said something else (see [`Step::Aside`]).
    fn aside(&mut self, _aside: A) -> Result<Flow> {
        Ok(Flow::Continue)
    }
    /// The source ended (a recording's end, `notes` what the replay met on its way): stop,
    /// or go on waiting for [`Front::other`].
    fn ended(&mut self, _notes: &[Note]) -> Result<Flow> {
        Ok(Flow::Stop)
    }
    /// The last, partial interval, which the stop cut short and [`drive`] finished.
    fn last(&mut self, _snap: Box<Snapshot>) -> Result<()> {
        Ok(())
    }
    /// The pipeline's clock is held (a paused replay at its recorded pace).
    fn held(&self) -> bool {
        false
    }
}

/// What [`drive`] drives: a [`Pipeline`], or an attached viewer's link (a trait, also so
/// that its rule is tested without probes).
pub trait Driven {
    /// What else it says besides intervals ([`Step::Aside`]).
    type Aside;
    fn next(&mut self) -> impl Future<Output = Result<Step<Self::Aside>>>;
    /// The last, partial interval, which a stop cut short: none where the source keeps no
    /// model (a link).
    fn finish(&mut self) -> Result<Option<Box<Snapshot>>> {
        Ok(None)
    }
    /// The front end paused or resumed (a paced replay stops its clock while paused).
    fn hold(&mut self, _held: bool) {}
    fn replay_notes(&self) -> &[Note] {
        &[]
    }
}

impl Driven for Pipeline {
    type Aside = std::convert::Infallible;

    fn next(&mut self) -> impl Future<Output = Result<Step>> {
        Pipeline::next(self)
    }

    fn finish(&mut self) -> Result<Option<Box<Snapshot>>> {
        Pipeline::finish(self)
    }

    fn hold(&mut self, held: bool) {
        Pipeline::hold(self, held);
    }

    fn replay_notes(&self) -> &[Note] {
        Pipeline::replay_notes(self)
    }
}

/// The one loop of every front end: intervals to `front` until the source ends or `front`
/// says stop (a signal, `q`, `-n`, the reader gone), then the pipeline finished whatever
/// stopped it, the last, partial interval to [`Front::last`] (nothing after `-n`, whose last
/// interval was the final one, nor after a recording's end).
pub async fn drive<D: Driven>(pipeline: &mut D, front: &mut impl Front<D::Aside>) -> Result<()> {
    let mut ended = false;
    loop {
        pipeline.hold(front.held());
        tokio::select! {
            biased;
            flow = front.other() => if flow? == Flow::Stop {
                break;
            },
            step = pipeline.next(), if !ended => {
                let flow = match step? {
                    Step::Interval(snap) => front.interval(snap)?,
                    Step::Aside(aside) => front.aside(aside)?,
                    Step::End => {
                        ended = true;
                        front.ended(pipeline.replay_notes())?
                    }
                };
                if flow == Flow::Stop {
                    break;
                }
            }
        }
    }
    if let Some(last) = pipeline.finish()? {
        front.last(last)?;
    }
    Ok(())
}

fn header(info: &RunInfo) -> Header {
    recording::new_header(
        info.host.clone(),
        info.kernel.clone(),
        info.started_ns,
        info.started_unix_ms,
        info.interval_ns,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Intervals numbered from 1, one per `next`, for ever; `finish` gives the partial one.
    #[derive(Default)]
    struct Counting {
        seq: u64,
        finished: u32,
        held: Vec<bool>,
    }

    impl Driven for Counting {
        type Aside = std::convert::Infallible;

        async fn next(&mut self) -> Result<Step> {
            tokio::task::yield_now().await;
            self.seq += 1;
            Ok(Step::Interval(Box::new(Snapshot {
                seq: self.seq,
                ..Snapshot::default()
            })))
        }

        fn finish(&mut self) -> Result<Option<Box<Snapshot>>> {
            self.finished += 1;
            self.seq += 1;
            Ok(Some(Box::new(Snapshot {
                seq: self.seq,
                ..Snapshot::default()
            })))
        }

        fn hold(&mut self, held: bool) {
            self.held.push(held);
        }
    }

    /// Stops after `stop_after` intervals, by itself (`-n`) or, `by_signal`, from
    /// [`Front::other`] as a signal or `q` does.
    struct Stopping {
        stop_after: u64,
        by_signal: bool,
        seen: Vec<u64>,
        last: Option<u64>,
    }

    impl Front for Stopping {
        async fn other(&mut self) -> Result<Flow> {
            if self.by_signal && self.seen.len() as u64 >= self.stop_after {
                return Ok(Flow::Stop);
            }
            std::future::pending().await
        }

        fn interval(&mut self, snap: Box<Snapshot>) -> Result<Flow> {
            self.seen.push(snap.seq);
            Ok(
                if !self.by_signal && self.seen.len() as u64 >= self.stop_after {
                    Flow::Stop
                } else {
                    Flow::Continue
                },
            )
        }

        fn last(&mut self, snap: Box<Snapshot>) -> Result<()> {
            self.last = Some(snap.seq);
            Ok(())
        }

        fn held(&self) -> bool {
            true
        }
    }

    fn run(by_signal: bool) -> (Counting, Stopping) {
        let mut pipeline = Counting::default();
        let mut front = Stopping {
            stop_after: 3,
            by_signal,
            seen: Vec::new(),
            last: None,
        };
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(drive(&mut pipeline, &mut front))
            .unwrap();
        (pipeline, front)
    }

    #[test]
    fn a_stop_from_outside_finishes_the_pipeline_and_hands_over_the_partial_interval() {
        let (pipeline, front) = run(true);
        assert_eq!(front.seen, [1, 2, 3]);
        assert_eq!(pipeline.finished, 1, "finished once");
        assert_eq!(
            front.last,
            Some(4),
            "the partial interval, to the front end"
        );
        assert!(
            pipeline.held.iter().all(|&h| h),
            "the front end's hold, every turn"
        );
    }

    #[test]
    fn a_front_end_that_stops_itself_finishes_the_pipeline_too() {
        let (pipeline, front) = run(false);
        assert_eq!(front.seen, [1, 2, 3]);
        assert_eq!(pipeline.finished, 1);
        assert_eq!(front.last, Some(4));
    }
}
