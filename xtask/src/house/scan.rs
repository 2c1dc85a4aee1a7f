//! One file's declarations and the paths it names.

use std::collections::HashMap;

use super::lex::{Tok, Token, lex};

/// Where a path starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Start {
    /// Absolute in the namespace (`crate::`, `super::`, `self::`, an extern crate).
    Abs(Vec<String>),
    /// A `use` path from a plain name: a child module of `module`, or another crate.
    Child(Vec<String>),
}

/// A path named in a file, not yet resolved through re-exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Named {
    pub(super) start: Start,
    pub(super) rest: Vec<String>,
    pub(super) line: usize,
    /// Inside a `#[cfg(test)]` module.
    pub(super) test: bool,
}

/// A `pub use` in module `module`: `name` stands for `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Reexport {
    pub(super) module: Vec<String>,
    pub(super) name: String,
    pub(super) start: Start,
    pub(super) rest: Vec<String>,
}

/// What one file declares and names.
#[derive(Debug, Default)]
pub(super) struct Scan {
    /// Child modules declared `mod x;` (their files), with whether under `#[cfg(test)]`.
    pub(super) files: Vec<(Vec<String>, bool)>,
    /// Inline `mod x { .. }` modules, with whether they are test code.
    pub(super) inline: Vec<(Vec<String>, bool)>,
    pub(super) named: Vec<Named>,
    pub(super) reexports: Vec<Reexport>,
}

/// One leaf of a path or a `use` tree: its segments, and the name it is given (`as`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Leaf {
    pub(super) segs: Vec<String>,
    pub(super) alias: Option<String>,
}

pub(super) fn ident(toks: &[Token], i: usize) -> Option<&str> {
    match toks.get(i).map(|t| &t.tok) {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

pub(super) fn is(toks: &[Token], i: usize, tok: &Tok) -> bool {
    toks.get(i).map(|t| &t.tok) == Some(tok)
}

/// A path or `use` tree from `i`: its leaves and the index after it. `a::b::{c, d::{self, e
/// as f}, g::*}` gives `a::b::c`, `a::b::d`, `a::b::d::e` (as `f`) and `a::b::g`.
pub(super) fn parse_tree(toks: &[Token], mut i: usize) -> (Vec<Leaf>, usize) {
    let mut segs = Vec::new();
    loop {
        if is(toks, i, &Tok::Punct('{')) {
            let mut leaves = Vec::new();
            i += 1;
            while i < toks.len() && !is(toks, i, &Tok::Punct('}')) {
                let (inner, next) = parse_tree(toks, i);
                for leaf in inner {
                    let mut full = segs.clone();
                    full.extend(leaf.segs.into_iter().filter(|s| s != "self"));
                    leaves.push(Leaf {
                        segs: full,
                        alias: leaf.alias,
                    });
                }
                i = next;
                // Past anything left of this branch (`as _`), to the comma or the brace.
                while i < toks.len()
                    && !is(toks, i, &Tok::Punct(','))
                    && !is(toks, i, &Tok::Punct('}'))
                {
                    i += 1;
                }
                if is(toks, i, &Tok::Punct(',')) {
                    i += 1;
                }
            }
            return (leaves, i + 1);
        }
        if is(toks, i, &Tok::Punct('*')) {
            return (vec![Leaf { segs, alias: None }], i + 1);
        }
        let Some(word) = ident(toks, i) else {
            return (vec![Leaf { segs, alias: None }], i);
        };
        segs.push(word.to_string());
        i += 1;
        if is(toks, i, &Tok::Path) {
            i += 1;
            continue;
        }
        let alias = if ident(toks, i) == Some("as") {
            i += 2;
            ident(toks, i - 1).map(str::to_string)
        } else {
            None
        };
        return (vec![Leaf { segs, alias }], i);
    }
}

/// Whether the attributes just before index `i` (an item's keyword, after its visibility)
/// include `#[cfg(test)]`.
pub(super) fn cfg_test_before(toks: &[Token], i: usize) -> bool {
    let mut j = i;
    // Back over the visibility: `pub`, `pub(crate)`, `pub(in a::b)`.
    if j > 0 && is(toks, j - 1, &Tok::Punct(')')) {
        while j > 0 && !is(toks, j - 1, &Tok::Punct('(')) {
            j -= 1;
        }
        j = j.saturating_sub(1);
    }
    if j > 0 && ident(toks, j - 1) == Some("pub") {
        j -= 1;
    }
    let mut test = false;
    while j > 0 && is(toks, j - 1, &Tok::Punct(']')) {
        let end = j - 1;
        let mut k = end;
        let mut depth = 0;
        loop {
            match toks[k].tok {
                Tok::Punct(']') => depth += 1,
                Tok::Punct('[') => depth -= 1,
                _ => {}
            }
            if depth == 0 || k == 0 {
                break;
            }
            k -= 1;
        }
        let words: Vec<&Tok> = toks[k..=end].iter().map(|t| &t.tok).collect();
        // `#[cfg(test)]`, `#[cfg(any(test, feature = "fixtures"))]`: code for tests (the
        // feature's name, a string, is not among the tokens); `not(test)` is not.
        let word = |w: &str| words.contains(&&Tok::Ident(w.into()));
        test |= words.get(1) == Some(&&Tok::Ident("cfg".into())) && word("test") && !word("not");
        j = k.saturating_sub(1);
        if j > 0 && is(toks, j, &Tok::Punct('!')) {
            j -= 1;
        }
        if !is(toks, j, &Tok::Punct('#')) {
            break;
        }
    }
    test
}

/// The declarations and paths of one file whose module is `module` (`test`: the file is a
/// `#[cfg(test)]` module or inside one). `externs` are the crate names the drawing knows.
pub(super) fn scan(
    src: &str,
    krate: &[String],
    module: &[String],
    test: bool,
    externs: &HashMap<String, Vec<String>>,
) -> Scan {
    let toks = lex(src);
    let mut out = Scan::default();
    // One frame per open brace: the inline module it opens (with its test flag), if any.
    let mut frames: Vec<Option<(String, bool)>> = Vec::new();
    let current = |frames: &[Option<(String, bool)>]| -> (Vec<String>, bool) {
        let mut m = module.to_vec();
        let mut t = test;
        for (name, test) in frames.iter().flatten() {
            m.push(name.clone());
            t |= test;
        }
        (m, t)
    };
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].tok {
            Tok::Punct('{') => {
                frames.push(None);
                i += 1;
            }
            Tok::Punct('}') => {
                frames.pop();
                i += 1;
            }
            Tok::Ident(w) if w == "mod" && ident(&toks, i + 1).is_some() => {
                let name = ident(&toks, i + 1).unwrap_or_default().to_string();
                let mod_test = cfg_test_before(&toks, i);
                let (mut m, t) = current(&frames);
                m.push(name.clone());
                if is(&toks, i + 2, &Tok::Punct('{')) {
                    out.inline.push((m, t || mod_test));
                    frames.push(Some((name, mod_test)));
                    i += 3;
                } else {
                    out.files.push((m, t || mod_test));
                    i += 2;
                }
            }
            Tok::Ident(w) if w == "use" => {
                let public = i > 0
                    && (ident(&toks, i - 1) == Some("pub")
                        || (is(&toks, i - 1, &Tok::Punct(')')) && {
                            let mut k = i - 1;
                            while k > 0 && !is(&toks, k, &Tok::Punct('(')) {
                                k -= 1;
                            }
                            k > 0 && ident(&toks, k - 1) == Some("pub")
                        }));
                let (m, t) = current(&frames);
                let line = toks[i].line;
                let mut j = i + 1;
                if is(&toks, j, &Tok::Path) {
                    j += 1; // `use ::std::..`
                }
                let (leaves, next) = parse_tree(&toks, j);
                for leaf in leaves {
                    let Some((start, rest)) = start_of(&leaf.segs, krate, &m, externs, true) else {
                        continue;
                    };
                    if public {
                        // A door, not an arrow: whoever names the path through it gets the
                        // arrow to where it leads.
                        let name = leaf.alias.clone().or_else(|| leaf.segs.last().cloned());
                        if let Some(name) = name.filter(|n| n != "_" && n != "self") {
                            out.reexports.push(Reexport {
                                module: m.clone(),
                                name,
                                start,
                                rest,
                            });
                        }
                        continue;
                    }
                    out.named.push(Named {
                        start,
                        rest,
                        line,
                        test: t,
                    });
                }
                i = next.max(i + 1);
            }
            Tok::Ident(w) => {
                let after_path =
                    i > 0 && (is(&toks, i - 1, &Tok::Path) || is(&toks, i - 1, &Tok::Punct('.')));
                let in_vis = i > 0 && ident(&toks, i - 1) == Some("in");
                let rooted = matches!(w.as_str(), "crate" | "super" | "self")
                    || externs.contains_key(w.as_str());
                if rooted && !after_path && !in_vis && is(&toks, i + 1, &Tok::Path) {
                    let (m, t) = current(&frames);
                    let line = toks[i].line;
                    let (leaves, next) = parse_tree(&toks, i);
                    for leaf in leaves {
                        if let Some((start, rest)) = start_of(&leaf.segs, krate, &m, externs, false)
                        {
                            out.named.push(Named {
                                start,
                                rest,
                                line,
                                test: t,
                            });
                        }
                    }
                    i = next.max(i + 1);
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// Where a path of module `module` of the crate mounted at `krate` starts: `crate`, `super`,
/// `self` and the known extern crates are absolute; in a `use`, a plain first name is a child
/// module (or another crate).
pub(super) fn start_of(
    segs: &[String],
    krate: &[String],
    module: &[String],
    externs: &HashMap<String, Vec<String>>,
    in_use: bool,
) -> Option<(Start, Vec<String>)> {
    let first = segs.first()?;
    match first.as_str() {
        "crate" => Some((Start::Abs(krate.to_vec()), segs[1..].to_vec())),
        "self" => Some((Start::Abs(module.to_vec()), segs[1..].to_vec())),
        "super" => {
            let mut m = module.to_vec();
            let mut k = 0;
            while segs.get(k).is_some_and(|s| s == "super") {
                m.pop();
                k += 1;
            }
            Some((Start::Abs(m), segs[k..].to_vec()))
        }
        name => {
            if let Some(mount) = externs.get(name) {
                Some((Start::Abs(mount.clone()), segs[1..].to_vec()))
            } else if in_use {
                Some((Start::Child(module.to_vec()), segs.to_vec()))
            } else {
                None
            }
        }
    }
}
