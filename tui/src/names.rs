//! Names from the host shown as text: process names, file paths, cgroup and disk names, stack
//! frames, and whatever a recording's header or a path on the command line says. Any local
//! user chooses their process's name (`prctl(PR_SET_NAME)`, `/proc/self/comm`) and their
//! files' names, so none of them may reach a terminal raw: [`show`] is the one function every
//! text output passes them through (`--batch`, the live view and its `w` capture, the HTML
//! report, `check`, the error messages), as `ps` and `top` do. It imports nothing of the
//! tool, so every module may use it (the live view shows a snapshot's names with it:
//! `front::app::shown`).
//!
//! What it shows differently, so that it is seen and acts on nothing:
//! - every control character (C0, DEL and C1) as `\x1b`, `\x7f`, `\u{9b}`;
//! - the invisible characters that reorder or hide text (bidirectional overrides and
//!   isolates, zero-width spaces and joiners, line and paragraph separators, the byte order
//!   mark, tags) as `\u{202e}` and the like;
//! - bytes that are not UTF-8, where the bytes are at hand ([`show_bytes`], [`path`]), as
//!   `\xff`; names the model already holds as text carry them as U+FFFD, `�`.
//!
//! A backslash is left as it is (systemd's unit names hold `\x2d` themselves), so a name that
//! spells `\x1b` reads like one that holds ESC: the JSON report keeps the exact characters
//! (escaped by JSON), for when it matters. The HTML report escapes the shown text as HTML;
//! the exporter's labels keep the exact text with OpenMetrics' escaping.
//!
//! Widths are counted in terminal columns ([`width`], [`pad`]): after [`show`], every
//! character is printable and its width is its Unicode width (2 for CJK, 0 for a combining
//! mark).

use std::{borrow::Cow, fmt::Write as _, os::unix::ffi::OsStrExt as _, path::Path};

use unicode_width::UnicodeWidthStr as _;

/// Whether `c` is shown escaped: a control character, or one that is invisible and changes
/// how the text around it reads.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{ad}'                         // soft hyphen
            | '\u{61c}'                      // Arabic letter mark
            | '\u{180e}'                     // Mongolian vowel separator
            | '\u{200b}'..='\u{200f}'        // zero-width space, joiners, LRM, RLM
            | '\u{2028}'..='\u{202e}'        // line and paragraph separators, bidi embeddings
            | '\u{2060}'..='\u{206f}'        // word joiner, invisible operators, isolates
            | '\u{feff}'                     // byte order mark
            | '\u{fff9}'..='\u{fffb}'        // interlinear annotations
            | '\u{e0000}'..='\u{e007f}' // tags
        )
}

fn escape_char(out: &mut String, c: char) {
    let _ = if c.is_ascii() {
        write!(out, "\\x{:02x}", u32::from(c))
    } else {
        write!(out, "\\u{{{:x}}}", u32::from(c))
    };
}

/// `text` as it may be shown on a terminal or in a file read on one: unchanged (borrowed)
/// when nothing in it needs showing differently.
pub fn show(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(hidden) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if hidden(c) {
            escape_char(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Bytes (a name as the kernel gave it) as [`show`] shows text, each byte that is not part
/// of a UTF-8 character as `\xNN`.
pub fn show_bytes(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return show(text);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(&show(chunk.valid()));
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

/// A path (from the command line, or one the tool made) for a message.
pub fn path(path: &Path) -> Cow<'_, str> {
    show_bytes(path.as_os_str().as_bytes())
}

/// Columns `text` takes on a terminal, once shown.
#[cfg(test)]
pub fn width(text: &str) -> usize {
    show(text).width()
}

/// `text` shown, then padded with spaces to `columns` (never cut: a long name stays whole).
pub fn pad(text: &str, columns: usize) -> String {
    let shown = show(text);
    let used = shown.width();
    let mut out = shown.into_owned();
    out.extend(std::iter::repeat_n(' ', columns.saturating_sub(used)));
    out
}

/// `value` as one line of JSON, every string's characters kept exactly and escaped: JSON
/// escapes C0 itself; DEL, C1 and the invisible characters [`show`] shows are escaped here too
/// (`\u007f`, `\u202e`), so a line printed on a terminal acts on nothing and reads back the
/// same.
pub fn json_line(value: &impl serde::Serialize) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(4096);
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut out,
        EscapeHidden,
    ))?;
    // The formatter writes whole characters and ASCII escapes only.
    String::from_utf8(out).map_err(serde::ser::Error::custom)
}

/// serde_json's compact format, with the characters [`show`] shows escaped.
struct EscapeHidden;

impl serde_json::ser::Formatter for EscapeHidden {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (at, c) in fragment.char_indices().filter(|&(_, c)| hidden(c)) {
            writer.write_all(&fragment.as_bytes()[start..at])?;
            for unit in c.encode_utf16(&mut [0; 2]) {
                write!(writer, "\\u{unit:04x}")?;
            }
            start = at + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a local user can name a process: it sets the terminal's title and would hide
    /// what follows.
    const HOSTILE: &str = "\x1b]2;PWNED\x07z";

    #[test]
    fn every_control_character_is_shown_as_an_escape() {
        for b in (0u8..0x20).chain([0x7f]) {
            let text = format!("a{}b", char::from(b));
            assert_eq!(show(&text), format!("a\\x{b:02x}b"), "byte {b:#x}");
        }
        for c in ('\u{80}'..='\u{9f}').chain(['\u{85}']) {
            let text = format!("a{c}b");
            assert_eq!(show(&text), format!("a\\u{{{:x}}}b", u32::from(c)));
        }
        assert_eq!(show(HOSTILE), "\\x1b]2;PWNED\\x07z");
        assert_eq!(show("line\nnext\r\t"), "line\\x0anext\\x0d\\x09");
    }

    #[test]
    fn invisible_characters_that_reorder_or_hide_text_are_shown() {
        for (c, shown) in [
            ('\u{202e}', "\\u{202e}"),   // right-to-left override
            ('\u{2066}', "\\u{2066}"),   // left-to-right isolate
            ('\u{200b}', "\\u{200b}"),   // zero-width space
            ('\u{200d}', "\\u{200d}"),   // zero-width joiner
            ('\u{2028}', "\\u{2028}"),   // line separator
            ('\u{feff}', "\\u{feff}"),   // byte order mark
            ('\u{ad}', "\\u{ad}"),       // soft hyphen
            ('\u{e0041}', "\\u{e0041}"), // tag A
        ] {
            assert_eq!(show(&format!("x{c}y")), format!("x{shown}y"));
        }
    }

    #[test]
    fn plain_names_are_borrowed_unchanged() {
        for name in [
            "postgres",
            "kworker/u8:2",
            "/var/lib/mysql/ib_logfile0",
            "数据库",
            "café",
        ] {
            assert!(
                matches!(show(name), Cow::Borrowed(n) if n == name),
                "{name}"
            );
        }
        // systemd's own escapes stay as they are written.
        assert_eq!(
            show("dev-disk-by\\x2duuid.swap"),
            "dev-disk-by\\x2duuid.swap"
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_shown_as_hex() {
        for (bytes, shown) in [
            (&b"ok"[..], "ok"),
            (b"\xff", "\\xff"),
            (b"a\x80b", "a\\x80b"),               // a lone continuation byte
            (b"\xe6\x95", "\\xe6\\x95"),          // a character cut short
            (b"\xc0\xaf", "\\xc0\\xaf"),          // an overlong '/'
            (b"\xed\xa0\x80", "\\xed\\xa0\\x80"), // a surrogate
            (b"\x1b[2J\xfe\xe6\x95\xb0", "\\x1b[2J\\xfe数"),
        ] {
            assert_eq!(show_bytes(bytes), shown, "{bytes:?}");
        }
        let name = std::ffi::OsStr::from_bytes(b"/tmp/a\x1b\x07\n\xff.log");
        assert_eq!(path(Path::new(name)), "/tmp/a\\x1b\\x07\\x0a\\xff.log");
    }

    #[test]
    fn widths_are_counted_in_columns_once_shown() {
        assert_eq!(width("fio"), 3);
        assert_eq!(width("数据库"), 6, "wide characters take two columns");
        assert_eq!(width("e\u{301}"), 1, "a combining accent takes none");
        assert_eq!(width(HOSTILE), "\\x1b]2;PWNED\\x07z".len());
        assert_eq!(width("\u{202e}"), 8);
        assert_eq!(pad("数据库", 8), "数据库  ");
        assert_eq!(width(&pad("数据库", 8)), 8);
        assert_eq!(pad("a\x07", 8), "a\\x07   ");
        assert_eq!(
            pad("longer than eight", 8),
            "longer than eight",
            "never cut"
        );
    }

    #[test]
    fn json_keeps_every_character_exactly_escaped() {
        let name = format!("{HOSTILE}\u{7f}\u{9b}\u{202e}\n\u{e0041}\u{fffd}数");
        let line = json_line(&serde_json::json!({ "comm": name })).unwrap();
        assert_eq!(
            line,
            r#"{"comm":"\u001b]2;PWNED\u0007z\u007f\u009b\u202e\n\udb40\udc41�数"}"#
        );
        assert!(!line.chars().any(hidden), "{line}");
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            back["comm"],
            name.as_str(),
            "the exact characters come back"
        );
    }
}
