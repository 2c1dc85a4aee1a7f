//! The sizes of the house (issue 21): no file over [`LONG_FILE`] lines and no function over
//! [`LONG_FN`], except where a comment says why. Long files and functions are listed, and
//! their count is held as a ratchet ([`SIZE_LIMITS`]) so it may only go down.
//!
//! An exception is marked by a comment `// house: long because ...` in the comments and
//! attributes just above a function or in its first lines, or `//! house: long because ...`
//! in a file's leading comment. Exceptions are listed with their reason, not counted.

use std::{fs, path::Path};

use anyhow::{Context, Result, bail};

use super::lex::{Tok, lex};

/// A file longer than this many lines is long.
pub(super) const LONG_FILE: usize = 600;
/// A function longer than this many lines (its `fn` line to its closing brace) is long.
pub(super) const LONG_FN: usize = 120;

/// How many long files and functions (not exceptions) the house may still carry; they may
/// only go down. 15 files and 22 functions when the check was written (issue 21); none once
/// the size pass split the rest, tui/src/front/app.rs and probe::load last.
const SIZE_LIMITS: (usize, usize) = (0, 0);

/// Where the Rust sources are, from the repository's root.
const SOURCES: &[&str] = &[
    "tui/src",
    "model/src",
    "probe/src",
    "common/src",
    "ebpf/src",
    "xtask/src",
    "tests",
];

/// The mark of an exception; the reason follows it.
const MARK: &str = "house: long because";

/// A function's name and its first and last lines (1-based, inclusive).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct FnSpan {
    pub(super) name: String,
    pub(super) start: usize,
    pub(super) end: usize,
}

impl FnSpan {
    pub(super) fn lines(&self) -> usize {
        self.end - self.start + 1
    }
}

/// Every `fn` with a body in `src`, nested ones too (an outer function's length includes
/// them). The body is the first `{` after the name outside parentheses and brackets (a
/// parameter may be a pattern with braces); a `;` first means no body (a trait's
/// declaration). Comments, strings and chars are gone in the lexer, so their braces do not
/// count.
pub(super) fn fn_spans(src: &str) -> Vec<FnSpan> {
    let toks = lex(src);
    let mut spans = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let (Tok::Ident(kw), Some(Tok::Ident(name))) = (&t.tok, toks.get(i + 1).map(|n| &n.tok))
        else {
            continue;
        };
        if kw != "fn" {
            continue;
        }
        let mut depth = 0i32;
        let mut body = None;
        for (j, n) in toks.iter().enumerate().skip(i + 2) {
            match n.tok {
                Tok::Punct('(' | '[') => depth += 1,
                Tok::Punct(')' | ']') => depth -= 1,
                Tok::Punct(';') if depth == 0 => break,
                Tok::Punct('{') if depth == 0 => {
                    body = Some(j);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = body else { continue };
        let mut braces = 0i32;
        for n in &toks[open..] {
            match n.tok {
                Tok::Punct('{') => braces += 1,
                Tok::Punct('}') => braces -= 1,
                _ => {}
            }
            if braces == 0 {
                spans.push(FnSpan {
                    name: name.clone(),
                    start: t.line,
                    end: n.line,
                });
                break;
            }
        }
    }
    spans
}

/// The reason after the mark in `line`, if it carries one.
fn reason(line: &str) -> Option<String> {
    let at = line.find(MARK)?;
    Some(line[at + MARK.len()..].trim().to_string())
}

/// The reason a file is long: a `//!` mark in its leading comment.
pub(super) fn file_exception(src: &str) -> Option<String> {
    src.lines()
        .map(str::trim)
        .take_while(|l| l.starts_with("//") || l.is_empty())
        .filter(|l| l.starts_with("//!"))
        .find_map(reason)
}

/// The reason a function is long: a `//` mark in the comments and attributes just above its
/// `fn` line, or in its first three lines.
pub(super) fn fn_exception(lines: &[&str], span: &FnSpan) -> Option<String> {
    let above = lines[..span.start - 1]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| l.starts_with("//") || l.starts_with("#["));
    let first = lines[span.start - 1..].iter().take(3).map(|l| l.trim());
    above
        .chain(first)
        .filter(|l| l.starts_with("//"))
        .find_map(reason)
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    let mut entries = fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            // Build output, if any, is not source.
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// List the long files and functions and fail when there are more than [`SIZE_LIMITS`].
pub(super) fn sizes(root: &Path) -> Result<()> {
    let mut files = Vec::new();
    for dir in SOURCES {
        rust_files(&root.join(dir), &mut files)?;
    }
    let (mut long_files, mut long_fns, mut excepted) = (Vec::new(), Vec::new(), Vec::new());
    for path in &files {
        let src = fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let name = path
            .strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string();
        let lines: Vec<&str> = src.lines().collect();
        if lines.len() > LONG_FILE {
            match file_exception(&src) {
                Some(why) => excepted.push(format!("{name} ({} lines): {why}", lines.len())),
                None => long_files.push((lines.len(), name.clone())),
            }
        }
        for span in fn_spans(&src) {
            if span.lines() <= LONG_FN {
                continue;
            }
            let at = format!("{name}:{} {}", span.start, span.name);
            match fn_exception(&lines, &span) {
                Some(why) => excepted.push(format!("{at} ({} lines): {why}", span.lines())),
                None => long_fns.push((span.lines(), at)),
            }
        }
    }
    long_files.sort_by(|a, b| b.cmp(a));
    long_fns.sort_by(|a, b| b.cmp(a));
    println!("files over {LONG_FILE} lines: {}", long_files.len());
    for (n, name) in &long_files {
        println!("  {n:>5} {name}");
    }
    println!("functions over {LONG_FN} lines: {}", long_fns.len());
    for (n, at) in &long_fns {
        println!("  {n:>5} {at}");
    }
    println!("long by exception: {}", excepted.len());
    for e in &excepted {
        println!("  {e}");
    }
    let (files_allowed, fns_allowed) = SIZE_LIMITS;
    if long_files.len() > files_allowed || long_fns.len() > fns_allowed {
        bail!(
            "{} files over {LONG_FILE} lines and {} functions over {LONG_FN} (allowed: \
             {files_allowed}, {fns_allowed}); split them, or mark one `// {MARK} ...`",
            long_files.len(),
            long_fns.len()
        );
    }
    Ok(())
}
