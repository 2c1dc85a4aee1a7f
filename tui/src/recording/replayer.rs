//! A recording replayed: one file, or the parts of a rotated one (`FILE.0001`, `FILE.0002`,
//! ...) read as one stream, to wherever it ends. What stopped a file short, and what the
//! recorder said about it (a gap, a stop), is kept as [`Note`]s: the replay and the report say
//! them, with the time of the last whole interval before each.

use std::{
    collections::VecDeque,
    ffi::OsString,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use super::{
    Header, RecordingError,
    codec::Decoded,
    reader::{Mark, Part},
};
use crate::model::{Input, SampleKind};

/// Something a replay met, in the file it met it in, and the wall-clock time of the last
/// whole interval before it (`None`: before the first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub path: PathBuf,
    pub mark: Mark,
    pub replayed_to_ms: Option<u64>,
}

impl Note {
    /// Damage in the middle of a file, rather than an end that came early.
    pub fn damaged(&self) -> bool {
        matches!(self.mark, Mark::Damaged { .. })
    }

    /// The file does not end as a recording does: cut, killed, stopped or damaged.
    pub fn ends_early(&self) -> bool {
        !matches!(self.mark, Mark::Gap { .. } | Mark::Missing { .. })
    }

    /// One line for a person.
    pub fn line(&self) -> String {
        let path = crate::names::path(&self.path);
        let to = self.replayed_to_ms.map_or_else(
            || "before its first whole interval".to_string(),
            |ms| format!("up to {}", crate::clock::rfc3339(ms)),
        );
        match &self.mark {
            Mark::Gap { inputs } => format!(
                "{path}: {inputs} events were not recorded after the interval ending {} (the disk fell behind)",
                self.replayed_to_ms
                    .map_or_else(|| "at the start".to_string(), crate::clock::rfc3339)
            ),
            Mark::Stopped { unix_ms, reason } => format!(
                "{path}: the recording stopped at {} ({reason}); it holds the intervals {to}",
                crate::clock::rfc3339(*unix_ms)
            ),
            Mark::Early { at } => format!(
                "{path}: ends at byte {at} without its end (the tool was killed, or its host went down); replayed {to}"
            ),
            Mark::Cut { at, frame } => format!(
                "{path}: cut short at byte {at}, in its last write, from byte {frame} (the tool was killed while writing it); replayed {to}, its last whole interval"
            ),
            Mark::Damaged { at, reason } => format!(
                "{path}: damaged at byte {at} ({reason}), not cut short: replayed {to}; the rest of the file is not read"
            ),
            Mark::Missing { first, last } => {
                let parts = if first == last {
                    format!("part {first}")
                } else {
                    format!("parts {first} to {last}")
                };
                format!(
                    "{path}: {parts} of this recording are missing: their intervals are not replayed"
                )
            }
        }
    }
}

/// Reads a recording, one input at a time.
pub struct Replayer {
    /// The first file's header.
    pub header: Header,
    current: Part,
    path: PathBuf,
    /// The parts still to read.
    rest: VecDeque<(PathBuf, Part)>,
    notes: Vec<Note>,
    /// The current part ended with its own end record (whole): `Some(true)` when the next
    /// part continues it.
    said_end: Option<bool>,
    /// The current part says the recorder stopped in it.
    stopped: bool,
    /// A part that continues the one before starts with a copy of its last sample as a
    /// baseline: skipped when the part before was read.
    skip_baseline: bool,
    last_sample_ns: Option<u64>,
    final_seen: bool,
}

impl Replayer {
    /// Opens one recording, or the parts of a rotated one (in any order; a path that does
    /// not exist but has parts, `FILE.0001`..., stands for them).
    pub fn open(paths: &[PathBuf]) -> Result<Self, RecordingError> {
        let paths = expand(paths);
        let mut parts = Vec::with_capacity(paths.len());
        for path in paths {
            let part = Part::open(&path)?;
            parts.push((path, part));
        }
        if parts.len() > 1 {
            check_set(&parts)?;
            parts.sort_by_key(|(_, p)| p.header.part);
        }
        let mut rest: VecDeque<_> = parts.into();
        let (path, current) = rest.pop_front().ok_or(RecordingError::NoFile)?;
        Ok(Self {
            header: current.header.clone(),
            current,
            path,
            rest,
            notes: Vec::new(),
            said_end: None,
            stopped: false,
            skip_baseline: false,
            last_sample_ns: None,
            final_seen: false,
        })
    }

    /// What the replay met so far (all of it once [`Replayer::next_input`] said the end).
    pub fn notes(&self) -> &[Note] {
        &self.notes
    }

    fn note(&mut self, mark: Mark) {
        let h = &self.header;
        let replayed_to_ms = self
            .last_sample_ns
            .map(|ns| h.started_unix_ms + ns.saturating_sub(h.started_ns) / 1_000_000);
        self.notes.push(Note {
            path: self.path.clone(),
            mark,
            replayed_to_ms,
        });
    }

    /// The next input; `None` at the end of the last file's whole data.
    pub fn next_input(&mut self) -> Option<Input> {
        loop {
            match self.current.next() {
                Ok(Some(Decoded::Input(input))) => {
                    if let Input::Sample(s) = &input {
                        if std::mem::take(&mut self.skip_baseline) && s.kind == SampleKind::Baseline
                        {
                            continue;
                        }
                        self.last_sample_ns = Some(s.now_ns);
                        self.final_seen = s.kind == SampleKind::Final;
                    }
                    self.skip_baseline = false;
                    return Some(input);
                }
                Ok(Some(Decoded::Nothing)) => {}
                Ok(Some(Decoded::Gap { inputs, .. })) => self.note(Mark::Gap { inputs }),
                Ok(Some(Decoded::Stop { unix_ms, reason })) => {
                    self.stopped = true;
                    self.note(Mark::Stopped { unix_ms, reason });
                }
                // What follows an end (a stop, when the next part could not be made) is
                // read too.
                Ok(Some(Decoded::End { rotated })) => self.said_end = Some(rotated),
                Ok(None) => {
                    // Formats before 5 say nothing at their end: the final sample does.
                    let whole = self.said_end.is_some()
                        || self.stopped
                        || (self.current.header.version < 5 && self.final_seen);
                    if !whole {
                        let at = self.current.offset();
                        self.note(Mark::Early { at });
                    }
                    let continued = self.said_end == Some(true) && !self.stopped;
                    if !self.next_part(continued) {
                        return None;
                    }
                }
                Err(mark) => {
                    self.note(mark);
                    if !self.next_part(false) {
                        return None;
                    }
                }
            }
        }
    }

    /// Goes on with the next part, if there is one. `continued`: the part before ended by
    /// rotation, so the next one's baseline repeats its last sample.
    fn next_part(&mut self, continued: bool) -> bool {
        let Some((path, part)) = self.rest.pop_front() else {
            return false;
        };
        let before = self.current.header.part.unwrap_or(0);
        let now = part.header.part.unwrap_or(0);
        (self.path, self.current) = (path, part);
        if now > before + 1 {
            self.note(Mark::Missing {
                first: before + 1,
                last: now - 1,
            });
        }
        self.skip_baseline = continued && now == before + 1;
        self.said_end = None;
        self.stopped = false;
        true
    }
}

/// The parts of a rotated recording given as its base name: `FILE` stands for `FILE.0001`,
/// `FILE.0002`, ... when it does not exist itself.
fn expand(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for path in paths {
        let parts = if path.exists() {
            Vec::new()
        } else {
            parts_of(path)
        };
        if parts.is_empty() {
            out.push(path.clone());
        } else {
            out.extend(parts);
        }
    }
    out
}

/// The files named `<path>.<digits>` beside `path`.
fn parts_of(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut prefix = name.as_bytes().to_vec();
    prefix.push(b'.');
    let mut parts: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.as_bytes();
            n.len() > prefix.len()
                && n.starts_with(&prefix)
                && n[prefix.len()..].iter().all(u8::is_ascii_digit)
        })
        .map(|e| dir.join(e.file_name()))
        .collect();
    parts.sort();
    parts
}

/// The name of part `n` of a recording written to `base`.
pub fn part_path(base: &Path, n: u32) -> PathBuf {
    let mut name = OsString::from(base.as_os_str());
    name.push(format!(".{n:04}"));
    PathBuf::from(name)
}

/// Parts given together must be parts of one run, each once.
fn check_set(parts: &[(PathBuf, Part)]) -> Result<(), RecordingError> {
    let (first_path, first) = &parts[0];
    let run = |h: &Header| (h.host.clone(), h.started_ns, h.started_unix_ms);
    let mut seen = Vec::new();
    for (path, part) in parts {
        let Some(n) = part.header.part else {
            return Err(RecordingError::NotAPart { path: path.clone() });
        };
        if run(&part.header) != run(&first.header) {
            return Err(RecordingError::OtherRun {
                path: path.clone(),
                other: first_path.clone(),
            });
        }
        if seen.contains(&n) {
            return Err(RecordingError::PartTwice {
                path: path.clone(),
                part: n,
            });
        }
        seen.push(n);
    }
    Ok(())
}
