//! The screen capture key (`w`): the screen as plain text, from the very buffer ratatui draws
//! (so it matches what is on screen), and a Markdown variant with the findings as a list, for
//! pasting into a ticket. The files name other processes and their files, so they are created
//! readable by their owner only (0600), and never overwrite anything.

use std::{
    fmt::Write as _,
    fs::OpenOptions,
    io::Write as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use ratatui::buffer::Buffer;

use crate::{clock, model::Snapshot, report};

/// The buffer's cells as lines of text, trailing blanks trimmed.
pub fn screen_text(buffer: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buffer.area.height {
        let mut line = String::new();
        for x in 0..buffer.area.width {
            line.push_str(buffer[(buffer.area.x + x, buffer.area.y + y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The Markdown variant: where and when, the screen in a code block, then the findings of
/// the interval on screen with their evidence, why and fix.
pub fn markdown(screen: &str, snap: &Snapshot, host: &str, unix_ms: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# iotop-bpf on {host}, {}\n", clock::rfc3339(unix_ms));
    // A fence longer than any run of backticks on screen: a name cannot close it.
    let longest = screen.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let _ = writeln!(out, "{fence}\n{screen}{fence}\n");
    let _ = writeln!(out, "## Findings\n");
    if snap.findings.is_empty() {
        let _ = writeln!(out, "None in this interval.");
    }
    for f in &snap.findings {
        let state = if f.active { "" } else { " (ended)" };
        let _ = writeln!(
            out,
            "- **{} {}**{state}: {}",
            f.severity.short(),
            f.kind.name(),
            f.summary
        );
        if !f.files.is_empty() {
            let _ = writeln!(out, "  - files: {}", f.files.join(", "));
        }
        if !f.evidence.is_empty() {
            let evidence: Vec<String> = f
                .evidence
                .iter()
                .map(|(k, v)| format!("{k}={}", report::html::evidence_text(v)))
                .collect();
            let _ = writeln!(out, "  - evidence: {}", evidence.join(", "));
        }
        let _ = writeln!(out, "  - why: {}", f.why);
        let _ = writeln!(out, "  - fix: {}", f.fix);
    }
    out
}

/// `db01` stays, anything unusual in a file name becomes `_`.
fn file_safe(host: &str) -> String {
    let safe: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe.is_empty() { "host".into() } else { safe }
}

/// `20261122-000001Z` from milliseconds since the epoch.
fn stamp(unix_ms: u64) -> String {
    let t = clock::rfc3339(unix_ms);
    format!(
        "{}{}{}-{}{}{}Z",
        &t[0..4],
        &t[5..7],
        &t[8..10],
        &t[11..13],
        &t[14..16],
        &t[17..19]
    )
}

/// Creates `path` for writing, mode 0600, failing if it exists.
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Writes `iotop-bpf-<host>-<time>.txt` and `.md` into `dir` (the current directory when
/// `None`), or into `$TMPDIR` (else /tmp) when that fails; returns the text file's path.
pub fn write(
    dir: Option<&Path>,
    host: &str,
    unix_ms: u64,
    text: &str,
    md: &str,
) -> Result<PathBuf> {
    let base = format!("iotop-bpf-{}-{}", file_safe(host), stamp(unix_ms));
    let fallback = std::env::var_os("TMPDIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    let here = dir.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let mut last_error = None;
    for dir in [here, fallback] {
        // Two captures in one second get -2, -3...: nothing is overwritten.
        for n in 1..100 {
            let name = if n == 1 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            let txt = dir.join(format!("{name}.txt"));
            let file = match create_private(&txt) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    last_error =
                        Some(anyhow::Error::new(e).context(format!("create {}", txt.display())));
                    break;
                }
            };
            let md_path = dir.join(format!("{name}.md"));
            let result = write_all(file, text, &txt).and_then(|()| {
                let file = create_private(&md_path)
                    .with_context(|| format!("create {}", md_path.display()))?;
                write_all(file, md, &md_path)
            });
            match result {
                Ok(()) => return Ok(txt),
                Err(e) => {
                    let _ = std::fs::remove_file(&txt);
                    last_error = Some(e);
                    break;
                }
            }
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no free file name for {base}")))
}

fn write_all(mut file: std::fs::File, body: &str, path: &Path) -> Result<()> {
    file.write_all(body.as_bytes())
        .and_then(|()| file.flush())
        .with_context(|| format!("write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::model::fixtures::demo_snapshot;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("iotop-bpf-capture-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn captures_are_private_and_never_overwrite() {
        let dir = temp_dir("private");
        let first = write(
            Some(&dir),
            "db 01/x",
            1_795_305_601_250,
            "screen\n",
            "# md\n",
        )
        .unwrap();
        assert_eq!(
            first.file_name().unwrap().to_str().unwrap(),
            "iotop-bpf-db_01_x-20261122-000001Z.txt"
        );
        let second = write(Some(&dir), "db 01/x", 1_795_305_601_250, "two\n", "# two\n").unwrap();
        assert_ne!(first, second);
        assert_eq!(std::fs::read_to_string(&first).unwrap(), "screen\n");
        for path in [&first, &first.with_extension("md"), &second] {
            let mode = std::fs::metadata(path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", path.display());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_directory_falls_back_to_tmp() {
        let missing = Path::new("/nonexistent/iotop-bpf-capture");
        let path = write(Some(missing), "fallback", 0, "x\n", "y\n").unwrap();
        let tmp = std::env::var_os("TMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        assert!(path.starts_with(&tmp), "{}", path.display());
        std::fs::remove_file(path.with_extension("md")).unwrap();
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn the_markdown_lists_the_findings() {
        let snap = demo_snapshot();
        let md = markdown("SCREEN\n", &snap, "db01", 0);
        assert!(
            md.starts_with("# iotop-bpf on db01, 1970-01-01T00:00:00.000Z"),
            "{md}"
        );
        assert!(md.contains("```\nSCREEN\n```"), "{md}");
        assert!(md.contains("- **CRIT write_amplification**"), "{md}");
        assert!(md.contains("  - why: ") && md.contains("  - fix: "), "{md}");
        assert!(md.contains("/data/lab001.log"), "{md}");
        let md = markdown("a ```` b\n", &snap, "db01", 0);
        assert!(md.contains("`````\na ```` b\n`````"), "{md}");
    }
}
