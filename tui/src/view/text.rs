//! Fitting text to the cells it has: words wrapped under their label, paths shortened from
//! the left (the file's name kept), and anything still too long cut with `…`, so that no
//! pane ever runs into the next or off the screen without saying so.

use ratatui::text::{Line, Span};

/// Columns a string takes.
pub fn width(text: &str) -> usize {
    Span::raw(text).width()
}

/// Columns a character takes.
fn char_width(c: char) -> usize {
    let mut buf = [0u8; 4];
    width(c.encode_utf8(&mut buf))
}

/// `text` cut to `max` columns, ending in `…` when cut.
pub fn elide(text: &str, max: usize) -> String {
    if width(text) <= max {
        return text.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = char_width(c);
        if used + w > max - 1 {
            break;
        }
        out.push(c);
        used += w;
    }
    // Not a space before the mark: `writes…`, not `writes …`.
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('…');
    out
}

/// `text` cut from the left to `max` columns, starting with `…` when cut.
pub fn elide_left(text: &str, max: usize) -> String {
    if width(text) <= max {
        return text.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let chars: Vec<char> = text.chars().collect();
    let mut used = 0;
    let mut start = chars.len();
    while start > 0 {
        let w = char_width(chars[start - 1]);
        if used + w > max - 1 {
            break;
        }
        used += w;
        start -= 1;
    }
    std::iter::once('…')
        .chain(chars[start..].iter().copied())
        .collect()
}

/// A path in `max` columns: whole components dropped from the left (`…/pack/tmp_pack_x`),
/// the file's own name kept as long as it fits at all.
pub fn shorten_path(path: &str, max: usize) -> String {
    if width(path) <= max {
        return path.to_string();
    }
    let parts: Vec<&str> = path.split('/').collect();
    // The longest tail of components that fits after `…/`.
    let mut tail = String::new();
    for part in parts.iter().rev() {
        let candidate = if tail.is_empty() {
            (*part).to_string()
        } else {
            format!("{part}/{tail}")
        };
        if width(&candidate) + 2 > max {
            break;
        }
        tail = candidate;
    }
    if tail.is_empty() {
        // Not even the name with `…/`: its end, which tells names apart best.
        return elide_left(parts.last().copied().unwrap_or(path), max);
    }
    format!("…/{tail}")
}

/// `line` in at most `max` columns: cut from the end, the cut marked with `…` in the style
/// of the text it ends (spans keep their styles), so nothing runs past its pane unseen.
pub fn fit(line: Line<'static>, max: usize) -> Line<'static> {
    if line.width() <= max {
        return line;
    }
    let Line {
        style,
        alignment,
        spans,
    } = line;
    let mut out: Vec<Span<'static>> = Vec::new();
    let mut used = 0;
    'spans: for span in spans {
        let mut kept = String::new();
        for c in span.content.chars() {
            let w = char_width(c);
            if used + w > max.saturating_sub(1) {
                if !kept.is_empty() {
                    out.push(Span::styled(kept, span.style));
                }
                break 'spans;
            }
            kept.push(c);
            used += w;
        }
        out.push(Span::styled(kept, span.style));
    }
    if max > 0 {
        // Not a space before the mark: `writes…`, not `writes …`.
        while out.len() > 1 && out.last().is_some_and(|s| s.content.trim_end().is_empty()) {
            out.pop();
        }
        match out.last_mut() {
            Some(last) => {
                let trimmed = last.content.trim_end().to_string();
                last.content = format!("{trimmed}…").into();
            }
            None => out.push(Span::raw("…")),
        }
    }
    Line {
        style,
        alignment,
        spans: out,
    }
}

/// `line` padded with spaces to `width` columns, so a row's style (the selection) covers
/// the whole row as a table's does.
pub fn pad(mut line: Line<'static>, width: usize) -> Line<'static> {
    let have = line.width();
    if have < width {
        line.spans.push(Span::raw(" ".repeat(width - have)));
    }
    line
}

/// Words of `text` in lines of at most `width` columns; a word longer than a line is cut
/// over lines. Never an empty result: an empty text is one empty line.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word = word.to_string();
        loop {
            let room = if line.is_empty() {
                width
            } else {
                width.saturating_sub(self::width(&line) + 1)
            };
            if self::width(&word) <= room {
                if !line.is_empty() {
                    line.push(' ');
                }
                line.push_str(&word);
                break;
            }
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
                continue;
            }
            // A word longer than a whole line: as much as fits, the rest on the next.
            let cut: String = split_at_width(&word, width);
            let rest = word[cut.len()..].to_string();
            lines.push(cut);
            word = rest;
            if word.is_empty() {
                break;
            }
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// The longest prefix of `text` at most `width` columns wide (at least one character).
fn split_at_width(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = char_width(c);
        if used + w > width && !out.is_empty() {
            break;
        }
        out.push(c);
        used += w;
    }
    out
}

/// `label` then `text` wrapped in `width` columns, the lines after the first indented under
/// the text (a hanging indent), so a wrapped line never reads as a new item.
pub fn hanging(label: &str, text: &str, width: usize) -> Vec<(String, String)> {
    let indent = self::width(label);
    let lines = wrap(text, width.saturating_sub(indent).max(8));
    lines
        .into_iter()
        .enumerate()
        .map(|(i, line)| {
            let lead = if i == 0 {
                label.to_string()
            } else {
                " ".repeat(indent)
            };
            (lead, line)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elision_says_it_cut() {
        assert_eq!(elide("fsync after 128 B writes", 12), "fsync after…");
        assert_eq!(elide("short", 12), "short");
        assert_eq!(elide_left("kernel_clone", 6), "…clone");
    }

    #[test]
    fn a_line_is_fitted_with_its_styles_and_says_it_was_cut() {
        use ratatui::style::{Color, Style};
        let red = Style::new().fg(Color::Red);
        let line = Line::from(vec![Span::styled("‼ ", red), Span::raw("kworker ×6 pids")]);
        assert_eq!(fit(line.clone(), 40), line);
        let cut = fit(line.clone(), 10);
        assert_eq!(cut.to_string(), "‼ kworker…");
        assert_eq!(cut.spans[0].style, red, "the symbol keeps its colour");
        assert_eq!(fit(line.clone(), 3).to_string(), "‼…");
        assert_eq!(fit(line, 0).to_string(), "");
        assert_eq!(fit(Line::raw("ab cd"), 4).to_string(), "ab…");
        for max in 0..20 {
            let fitted = fit(Line::raw("queue p50 1.4us p99 25us"), max);
            assert!(fitted.width() <= max, "{max}: {fitted}");
        }
        assert_eq!(pad(Line::raw("ab"), 4).to_string(), "ab  ");
    }

    #[test]
    fn paths_keep_their_file_name() {
        let path = "/home/ana/src/repo/.git/objects/pack/tmp_pack_Ab12Cd";
        assert_eq!(shorten_path(path, 80), path);
        assert_eq!(shorten_path(path, 24), "…/pack/tmp_pack_Ab12Cd");
        assert_eq!(shorten_path(path, 18), "…/tmp_pack_Ab12Cd");
        assert_eq!(shorten_path(path, 8), "…_Ab12Cd");
        for max in 1..60 {
            assert!(width(&shorten_path(path, max)) <= max, "{max}");
        }
    }

    #[test]
    fn wrapping_keeps_words_and_indents_under_the_label() {
        assert_eq!(
            wrap("batch records and sync less often", 16),
            ["batch records", "and sync less", "often"]
        );
        assert_eq!(wrap("", 10), [""]);
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        let lines = hanging("fix  ", "batch records and sync less often", 20);
        assert_eq!(lines[0], ("fix  ".to_string(), "batch records".to_string()));
        assert_eq!(lines[1], ("     ".to_string(), "and sync less".to_string()));
        assert_eq!(lines[2], ("     ".to_string(), "often".to_string()));
    }
}
