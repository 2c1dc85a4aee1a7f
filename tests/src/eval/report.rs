//! The verdicts: each figure against its oracle, each cell (workload x filesystem), and
//! the table.

use super::*;

/// A figure of the tool next to its oracle's.
#[derive(Clone, Debug)]
pub struct Magnitude {
    /// `device write bytes`, `syncs: fsync`...
    pub what: String,
    pub unit: Unit,
    pub tool: f64,
    pub oracle: f64,
    /// The oracle's source (`diskstats`, `strace`...).
    pub source: &'static str,
    /// Judged (else shown only, e.g. a finding that was not raised).
    pub judged: bool,
    /// Context for the reader (filefrag's extents).
    pub note: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Count,
    Ratio,
}

/// The tolerance: a figure more than this factor off its oracle is wrong.
pub const MAX_FACTOR: f64 = 2.0;

impl Magnitude {
    /// Within a factor of 2 (both zero: equal).
    pub fn within(&self) -> bool {
        if self.tool == 0.0 && self.oracle == 0.0 {
            return true;
        }
        if self.tool <= 0.0 || self.oracle <= 0.0 {
            return false;
        }
        let factor = (self.tool / self.oracle).max(self.oracle / self.tool);
        factor <= MAX_FACTOR
    }

    pub fn off(&self) -> bool {
        self.judged && !self.within()
    }

    fn show(&self, x: f64) -> String {
        match self.unit {
            Unit::Bytes => bytes(x),
            Unit::Count => format!("{x:.0}"),
            Unit::Ratio => format!("{x:.1}x"),
        }
    }

    /// `syncs: fsync 300 vs 300 (strace)`.
    pub fn describe(&self) -> String {
        let mark = if !self.judged {
            " (not judged)"
        } else if self.within() {
            ""
        } else {
            " **OFF**"
        };
        let note = if self.note.is_empty() {
            String::new()
        } else {
            format!("; {}", self.note)
        };
        format!(
            "{} {} vs {} ({}){mark}{note}",
            self.what,
            self.show(self.tool),
            self.show(self.oracle),
            self.source
        )
    }
}

pub(super) fn bytes(x: f64) -> String {
    if x >= f64::from(1u32 << 20) {
        format!("{:.1} MiB", x / f64::from(1u32 << 20))
    } else if x >= 1024.0 {
        format!("{:.1} KiB", x / 1024.0)
    } else {
        format!("{x:.0} B")
    }
}

/// One workload on one filesystem.
/// Seconds from a program's start within which its expected finding must be on screen.
pub const NAMED_WITHIN_S: f64 = 5.0;

pub struct Cell {
    pub workload: &'static str,
    pub about: &'static str,
    pub fs: Fs,
    pub expected: Vec<String>,
    /// WARN/CRIT kinds raised for it, and one summary per kind.
    pub raised: Vec<(String, String)>,
    pub true_positives: usize,
    pub false_negatives: usize,
    pub false_positives: Vec<String>,
    /// An expected finding that does not name the workload's file.
    pub unnamed: Option<String>,
    pub magnitudes: Vec<Magnitude>,
    /// The whole cell (filesystem, setup, tool, workload, settling).
    pub seconds: f64,
    /// The workload alone.
    pub workload_seconds: f64,
    /// Why this cell is known to be wrong (see [`Workload::known_miss_on`]).
    pub known_miss: Option<&'static str>,
    /// Seconds from the program's start to the first interval that showed an expected
    /// finding (its JSON line's arrival).
    pub first_named_s: Option<f64>,
    /// Where the findings are wrong: what they said (see `scoring::evidence_of`).
    pub evidence: Vec<String>,
}

impl Cell {
    pub fn findings_correct(&self) -> bool {
        self.false_negatives == 0
            && self.false_positives.is_empty()
            && self.unnamed.is_none()
            && !self.late()
    }

    /// An expected finding first shown more than [`NAMED_WITHIN_S`] after the program
    /// started: in an incident, that is the screen not telling the story.
    pub fn late(&self) -> bool {
        self.first_named_s.is_some_and(|s| s > NAMED_WITHIN_S)
    }

    pub fn magnitudes_off(&self) -> Vec<&Magnitude> {
        self.magnitudes.iter().filter(|m| m.off()).collect()
    }

    pub fn correct(&self) -> bool {
        self.findings_correct() && self.magnitudes_off().is_empty()
    }
}

pub struct Report {
    pub cells: Vec<Cell>,
    pub seconds: f64,
}

#[expect(clippy::cast_precision_loss, reason = "ratios of small counts")]
pub(super) fn ratio(num: usize, den: usize) -> f64 {
    if den == 0 {
        1.0
    } else {
        num as f64 / den as f64
    }
}

#[expect(clippy::cast_precision_loss, reason = "figures compared within 2x")]
pub(super) fn float(x: u64) -> f64 {
    x as f64
}

impl Report {
    pub fn true_positives(&self) -> usize {
        self.cells.iter().map(|c| c.true_positives).sum()
    }
    pub fn false_negatives(&self) -> usize {
        self.cells.iter().map(|c| c.false_negatives).sum()
    }
    pub fn false_positives(&self) -> usize {
        self.cells.iter().map(|c| c.false_positives.len()).sum()
    }
    pub fn precision(&self) -> f64 {
        let tp = self.true_positives();
        ratio(tp, tp + self.false_positives())
    }
    pub fn recall(&self) -> f64 {
        let tp = self.true_positives();
        ratio(tp, tp + self.false_negatives())
    }

    /// The table for the README.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| workload | fs | expected (WARN/CRIT) | raised (WARN/CRIT) | verdict | magnitudes: tool vs oracle |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|");
        for c in &self.cells {
            let expected = if c.expected.is_empty() {
                "nothing".to_string()
            } else {
                c.expected.join(", ")
            };
            let mut raised = if c.raised.is_empty() {
                "nothing".to_string()
            } else {
                c.raised
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if let Some(s) = c.first_named_s {
                raised.push_str(&format!(" (shown at {s:.1} s)"));
            }
            let mut verdicts = Vec::new();
            if c.false_negatives > 0 {
                verdicts.push("MISSED".to_string());
            }
            if !c.false_positives.is_empty() {
                verdicts.push(format!("FALSE POSITIVE ({})", c.false_positives.join(", ")));
            }
            if c.late() {
                verdicts.push(format!(
                    "LATE (first shown {:.1} s after the start)",
                    c.first_named_s.unwrap_or(0.0)
                ));
            }
            if let Some(kind) = &c.unnamed {
                verdicts.push(format!("{kind} DOES NOT NAME THE FILE"));
            }
            let off = c.magnitudes_off();
            if !off.is_empty() {
                verdicts.push(format!(
                    "MAGNITUDE OFF ({})",
                    off.iter()
                        .map(|m| m.what.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            let mut verdict = if verdicts.is_empty() {
                "ok".to_string()
            } else {
                verdicts.join("; ")
            };
            if let Some(why) = c.known_miss {
                verdict = format!("{verdict} (known: {why})");
            }
            let magnitudes = c
                .magnitudes
                .iter()
                .map(Magnitude::describe)
                .collect::<Vec<_>>()
                .join("<br>");
            let _ = writeln!(
                out,
                "| `{}` ({}) | {} | {expected} | {raised} | {verdict} | {magnitudes} |",
                c.workload, c.about, c.fs
            );
        }
        let judged: usize = self
            .cells
            .iter()
            .map(|c| c.magnitudes.iter().filter(|m| m.judged).count())
            .sum();
        let off: usize = self.cells.iter().map(|c| c.magnitudes_off().len()).sum();
        let programs: BTreeSet<&str> = self.cells.iter().map(|c| c.workload).collect();
        let _ = writeln!(
            out,
            "\n{} runs of {} workloads: {} true positives, {} false negatives, {} false positives; \
             precision {:.2}, recall {:.2}. Magnitudes: {} compared with their oracles, {} more \
             than {MAX_FACTOR}x off. {} runs wrong in all. {:.0} s.",
            self.cells.len(),
            programs.len(),
            self.true_positives(),
            self.false_negatives(),
            self.false_positives(),
            self.precision(),
            self.recall(),
            judged,
            off,
            self.cells.iter().filter(|c| !c.correct()).count(),
            self.seconds,
        );
        out
    }
}
