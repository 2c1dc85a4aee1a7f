//! The lexer: the tokens of a Rust source that matter for paths.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

#[derive(Debug, Clone)]
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) line: usize,
}

/// The tokens of a Rust source that matter for paths: identifiers, `::` and punctuation.
/// Comments, strings, byte strings, raw strings, chars and numbers are dropped.
pub(super) fn lex(src: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        c: src.chars().collect(),
        i: 0,
        line: 1,
        out: Vec::new(),
    };
    lexer.run();
    lexer.out
}

struct Lexer {
    c: Vec<char>,
    i: usize,
    line: usize,
    out: Vec<Token>,
}

impl Lexer {
    fn at(&self, i: usize) -> char {
        self.c.get(i).copied().unwrap_or('\0')
    }

    fn push(&mut self, tok: Tok) {
        self.out.push(Token {
            tok,
            line: self.line,
        });
    }

    fn run(&mut self) {
        while self.i < self.c.len() {
            let ch = self.c[self.i];
            let next = self.at(self.i + 1);
            match ch {
                '\n' => {
                    self.line += 1;
                    self.i += 1;
                }
                _ if ch.is_whitespace() => self.i += 1,
                '/' if next == '/' => {
                    while self.i < self.c.len() && self.c[self.i] != '\n' {
                        self.i += 1;
                    }
                }
                '/' if next == '*' => self.block_comment(),
                '"' => self.i = skip_string(&self.c, self.i + 1, &mut self.line),
                '\'' => self.char_or_lifetime(),
                _ if ch.is_ascii_digit() => self.i = self.word_end(self.i),
                _ if ch.is_alphabetic() || ch == '_' => self.word(),
                ':' if next == ':' => {
                    self.push(Tok::Path);
                    self.i += 2;
                }
                _ => {
                    self.push(Tok::Punct(ch));
                    self.i += 1;
                }
            }
        }
    }

    /// The index after the identifier (or number) that starts at `i`.
    fn word_end(&self, mut i: usize) -> usize {
        while i < self.c.len() && (self.c[i].is_alphanumeric() || self.c[i] == '_') {
            i += 1;
        }
        i
    }

    /// `/* .. */`, nested.
    fn block_comment(&mut self) {
        let mut depth = 0;
        while self.i < self.c.len() {
            if self.c[self.i] == '/' && self.at(self.i + 1) == '*' {
                depth += 1;
                self.i += 2;
            } else if self.c[self.i] == '*' && self.at(self.i + 1) == '/' {
                depth -= 1;
                self.i += 2;
                if depth == 0 {
                    return;
                }
            } else {
                self.line += usize::from(self.c[self.i] == '\n');
                self.i += 1;
            }
        }
    }

    /// A char literal ('a', '\n', '\u{2192}') or a lifetime or label ('a, 'static), from the
    /// quote.
    fn char_or_lifetime(&mut self) {
        if self.at(self.i + 1) == '\\' {
            self.i += 2;
            while self.i < self.c.len() && self.c[self.i] != '\'' {
                self.i += 1;
            }
            self.i += 1;
        } else if self.at(self.i + 2) == '\'' {
            self.i += 3;
        } else {
            self.i += 1;
        }
    }

    /// An identifier, or a raw, byte or C string or a byte char, which start like one.
    fn word(&mut self) {
        let j = self.word_end(self.i);
        let word: String = self.c[self.i..j].iter().collect();
        if matches!(word.as_str(), "r" | "br" | "cr") && matches!(self.at(j), '#' | '"') {
            let mut k = j;
            while self.at(k) == '#' {
                k += 1;
            }
            let hashes = k - j;
            if self.at(k) == '"' {
                self.i = skip_raw_string(&self.c, k + 1, hashes, &mut self.line);
                return;
            }
            if word == "r" && hashes == 1 {
                // A raw identifier: r#type.
                let end = self.word_end(k);
                self.push(Tok::Ident(self.c[k..end].iter().collect()));
                self.i = end;
                return;
            }
        }
        if matches!(word.as_str(), "b" | "c") && self.at(j) == '"' {
            self.i = skip_string(&self.c, j + 1, &mut self.line);
            return;
        }
        if word == "b" && self.at(j) == '\'' {
            self.i = j;
            self.char_or_lifetime();
            return;
        }
        self.push(Tok::Ident(word));
        self.i = j;
    }
}

/// The index after a string's closing quote; `i` is just after the opening one.
pub(super) fn skip_string(c: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            ch => {
                *line += usize::from(ch == '\n');
                i += 1;
            }
        }
    }
    i
}

/// The index after a raw string's closing quote and `hashes` hashes.
pub(super) fn skip_raw_string(c: &[char], mut i: usize, hashes: usize, line: &mut usize) -> usize {
    while i < c.len() {
        if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        *line += usize::from(c[i] == '\n');
        i += 1;
    }
    i
}
