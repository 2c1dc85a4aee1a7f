//! The matrix's cells: each judged from what a guest left in its output directory (`check`,
//! the smoke set's verdicts, the write-back test), and the table they make.

use std::{fmt::Write as _, fs, path::Path};

use super::Expect;

/// The smoke set's cells a `lockdown=confidentiality` boot must pass.
const LOCKDOWN_KEEPS: &[&str] = &["starts", "mode", "attribution", "dstate"];

/// The other cells, each with the loss `check` must name under lockdown if it fails (the
/// words of `Part::loss`).
const LOCKDOWN_LOSSES: &[(&str, &str)] = &[
    ("syncs", "sync calls are not seen"),
    ("lab001", "no amplification"),
    ("xfs tail", "sub-block tail writes"),
];

/// How a cell lost under lockdown, and named, begins its detail.
const LOST: &str = "lost under lockdown, named: ";

/// One cell: `Ok(detail)` or `Err(detail)`.
pub(super) type Cell = Result<String, String>;

/// The smoke set's cells for `mode` (`root`, `capabilities`) from the guest's output.
pub(super) fn smoke_cells(out: &Path, mode: &str) -> Vec<(String, Cell)> {
    let Ok(text) = fs::read_to_string(out.join(format!("{mode}.txt"))) else {
        let why = fs::read_to_string(out.join("smoke.txt"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.contains("panicked") || l.contains("error"))
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "the smoke set wrote nothing".to_string());
        return vec![("smoke".to_string(), Err(why))];
    };
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, '\t');
            let (cell, verdict, detail) = (parts.next()?, parts.next()?, parts.next()?);
            Some((
                cell.to_string(),
                if verdict == "pass" {
                    Ok(detail.to_string())
                } else {
                    Err(detail.to_string())
                },
            ))
        })
        .collect()
}

/// The `loads` cell: `check` exits 0 as root with nothing refused (under lockdown: naming
/// lockdown, its refusals counted); its mode and notes.
pub(super) fn loads_cell(out: &Path, expect: Expect, syscalls: &str) -> Cell {
    let check = fs::read_to_string(out.join("check.txt")).unwrap_or_default();
    let path = check
        .lines()
        .find_map(|l| l.strip_prefix("system calls: "))
        .unwrap_or("not named");
    if !path.starts_with(syscalls) {
        return Err(format!("system calls: {path} (expected {syscalls})"));
    }
    let path = path.split([':', ' ']).next().unwrap_or(path);
    let version = fs::read_to_string(out.join("version.txt")).unwrap_or_default();
    if !version.contains("rc=0") {
        return Err(format!("--version: {}", version.trim()));
    }
    if !check.contains("\nrc=0") {
        let why = check
            .lines()
            .find(|l| l.starts_with("iotop-bpf:"))
            .unwrap_or("check failed");
        return Err(why.to_string());
    }
    let refused = check.lines().filter(|l| l.starts_with("refused: ")).count();
    if expect == Expect::Lockdown {
        // It runs, its block probes typed, and says lockdown is why the rest is refused.
        let typed = ["tp_btf:block_rq_issue", "tp_btf:block_rq_complete"]
            .iter()
            .all(|tp| check.contains(&format!("attached: {tp}\n")));
        let named = check
            .lines()
            .filter(|l| l.starts_with("degraded: ") && l.contains("lockdown=confidentiality"))
            .count();
        return if typed && named > 0 {
            Ok(format!(
                "runs with its block probes typed; {refused} programs refused, {named} losses named with lockdown; system calls: {path}"
            ))
        } else {
            Err(format!(
                "under lockdown the block probes must be typed and the losses named: {}",
                check.trim()
            ))
        };
    }
    if let Some(refused) = check.lines().find(|l| l.starts_with("refused: ")) {
        return Err(refused.to_string());
    }
    let attached = check
        .lines()
        .filter(|l| l.starts_with("attached: "))
        .count();
    let raw = check
        .lines()
        .filter(|l| l.starts_with("attached: raw_tp:"))
        .count();
    let degraded = check
        .lines()
        .filter(|l| l.starts_with("degraded: "))
        .count();
    Ok(format!(
        "{attached} probes ({raw} raw), {refused} refused, {degraded} notes; system calls: {path}"
    ))
}

/// The write-back cell: the write-back test passed in the guest.
pub(super) fn writeback_cell(out: &Path) -> Cell {
    let text = fs::read_to_string(out.join("writeback.txt")).unwrap_or_default();
    let charged: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("charged to it"))
        .collect();
    if text.contains("\nrc=0") && !charged.is_empty() {
        Ok(charged.join("; "))
    } else {
        Err(text
            .lines()
            .find(|l| l.contains("panicked") || l.contains("only "))
            .unwrap_or("the write-back test did not pass")
            .to_string())
    }
}

/// A smoke cell of a lockdown boot: one it keeps as it is; another, failed, passes as lost
/// only where `check` (its `check.txt`) names that loss with lockdown as the reason.
pub(super) fn lockdown_cell(name: &str, cell: Cell, check: &str) -> Cell {
    let Err(why) = cell else {
        return cell;
    };
    if LOCKDOWN_KEEPS.contains(&name) {
        return Err(format!("lockdown keeps it: {why}"));
    }
    let loss = LOCKDOWN_LOSSES
        .iter()
        .find(|(cell, _)| *cell == name)
        .map(|(_, loss)| *loss);
    let named = loss.and_then(|loss| {
        check.lines().find(|l| {
            l.starts_with("degraded: ")
                && l.contains(loss)
                && l.contains("lockdown=confidentiality")
        })
    });
    match named {
        Some(line) => Ok(format!("{LOST}{line}")),
        None => Err(format!(
            "lost, and check does not name it with lockdown: {why}"
        )),
    }
}

/// A cell in the table: `yes`, `NO`, `no: lockdown, named`, or `–` where not run.
pub(super) fn mark(cell: Option<&Cell>) -> &'static str {
    match cell {
        None => "–",
        Some(Ok(detail)) if detail.starts_with(LOST) => "no: lockdown, named",
        Some(Ok(_)) => "yes",
        Some(Err(_)) => "**NO**",
    }
}

/// One row of the table and the details behind it.
pub(super) struct Row {
    pub(super) kernel: String,
    pub(super) cells: Vec<(String, Cell)>,
}

impl Row {
    fn get(&self, name: &str) -> Option<&Cell> {
        self.cells.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// Several cells as one: every one that ran passed (`None` when none ran).
    fn all(&self, names: impl Fn(&str) -> bool) -> Option<Cell> {
        let ran: Vec<&Cell> = self
            .cells
            .iter()
            .filter(|(n, _)| names(n))
            .map(|(_, c)| c)
            .collect();
        // Lost under lockdown if any is, and none failed.
        (!ran.is_empty()).then(|| {
            let lost = ran
                .iter()
                .any(|c| c.as_ref().is_ok_and(|d| d.starts_with(LOST)));
            ran.into_iter()
                .try_for_each(|c| c.clone().map(drop))
                .map(|()| {
                    if lost {
                        LOST.to_string()
                    } else {
                        String::new()
                    }
                })
        })
    }
}

/// The table, in Markdown.
pub(super) fn table(rows: &[Row]) -> String {
    let mut md = String::from(
        "| kernel | loads | system calls on | attribution = diskstats | syncs (short-lived) | D state, wait sites | findings (lab001, XFS tail) | documented capabilities | write-back to the dirtier |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let findings = row.all(|n| n == "lab001" || n == "xfs tail");
        let findings = match (mark(findings.as_ref()), row.get("xfs tail")) {
            ("yes", None) => "yes (lab001; no XFS here)",
            (mark, _) => mark,
        };
        // The path `check` named, with the `other calls` cell's verdict where it ran.
        let path = match row.get("loads") {
            Some(Ok(detail)) => detail.rsplit("system calls: ").next().unwrap_or("?"),
            _ => "?",
        };
        let path = match row.get("other calls") {
            Some(Err(_)) => format!("{path}: **NO**"),
            _ => path.to_string(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {path} | {} | {} | {} | {findings} | {} | {} |",
            row.kernel,
            mark(row.get("loads")),
            mark(row.get("attribution")),
            mark(row.get("syncs")),
            mark(row.get("dstate")),
            mark(row.all(|n| n.starts_with("capabilities ")).as_ref()),
            mark(row.get("write-back")),
        );
    }
    md.push('\n');
    for row in rows {
        for (name, cell) in &row.cells {
            let _ = match cell {
                Ok(detail) => writeln!(md, "- {} {name}: {detail}", row.kernel),
                Err(why) => writeln!(md, "- {} {name}: **FAILED**: {why}", row.kernel),
            };
        }
    }
    md
}
