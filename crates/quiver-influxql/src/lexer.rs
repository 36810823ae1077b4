//! The InfluxQL scanner: text to tokens, on demand.
//!
//! Whitespace and comments (`-- to end of line`, `/* ... */`) are skipped. Regular
//! expressions are not tokens of their own: `/` is ambiguous (division or a regex), so the
//! parser asks for [`Lexer::scan_regex`] at the few places a regex may appear, from the
//! offset of a `/` token it peeked.
//!
//! Positions are byte offsets into the text; the parser turns them into 1-based line and
//! character numbers only when it reports an error.

use crate::ast::keyword;

/// What a token is. Literal texts are kept as written (numbers, durations) or unescaped
/// (strings, identifiers); the parser converts and range-checks them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TokenKind {
    /// A bare (`cpu`) or double-quoted (`"my field"`) identifier, unescaped.
    Ident(String),
    /// A keyword, upper-case (`SELECT`, `AND`, ...; not `TRUE`/`FALSE`, see `Bool`).
    Keyword(&'static str),
    /// `'...'`, unescaped.
    Str(String),
    /// Decimal digits.
    Integer(String),
    /// Digits with a decimal point (`1.5`, `.5`, `100.`).
    Number(String),
    /// Digits followed by letters (`10s`, `1h30m`, `10x`): validated by the parser.
    Duration(String),
    /// `true` / `false`.
    Bool(bool),
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    BitAnd,
    BitOr,
    BitXor,
    Eq,
    NotEq,
    EqRegex,
    NotEqRegex,
    Lt,
    LtEq,
    Gt,
    GtEq,
    LParen,
    RParen,
    Comma,
    Colon,
    DoubleColon,
    Semicolon,
    Dot,
    Eof,
    /// A character InfluxQL has no use for (or a `$param`, which Quiver does not bind).
    Illegal(String),
}

impl TokenKind {
    /// The token as InfluxDB 1.x names it in "found X, expected Y": the literal text for
    /// identifiers, strings and numbers, the upper-case keyword, the operator, or `EOF`.
    pub(crate) fn found(&self) -> String {
        let text = match self {
            TokenKind::Ident(s)
            | TokenKind::Str(s)
            | TokenKind::Integer(s)
            | TokenKind::Number(s)
            | TokenKind::Duration(s)
            | TokenKind::Illegal(s) => return s.clone(),
            TokenKind::Keyword(k) => k,
            TokenKind::Bool(true) => "TRUE",
            TokenKind::Bool(false) => "FALSE",
            TokenKind::Add => "+",
            TokenKind::Sub => "-",
            TokenKind::Mul => "*",
            TokenKind::Div => "/",
            TokenKind::Mod => "%",
            TokenKind::BitAnd => "&",
            TokenKind::BitOr => "|",
            TokenKind::BitXor => "^",
            TokenKind::Eq => "=",
            TokenKind::NotEq => "!=",
            TokenKind::EqRegex => "=~",
            TokenKind::NotEqRegex => "!~",
            TokenKind::Lt => "<",
            TokenKind::LtEq => "<=",
            TokenKind::Gt => ">",
            TokenKind::GtEq => ">=",
            TokenKind::LParen => "(",
            TokenKind::RParen => ")",
            TokenKind::Comma => ",",
            TokenKind::Colon => ":",
            TokenKind::DoubleColon => "::",
            TokenKind::Semicolon => ";",
            TokenKind::Dot => ".",
            TokenKind::Eof => "EOF",
        };
        text.to_string()
    }

    /// True when this is the keyword `kw` (upper-case).
    pub(crate) fn is_keyword(&self, kw: &str) -> bool {
        matches!(self, TokenKind::Keyword(k) if *k == kw)
    }
}

/// A token and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub kind: TokenKind,
    /// Byte offset of the first character. For `EOF` it may be one past the end of the text:
    /// see [`Lexer::next_token`].
    pub start: usize,
}

/// A scanning error: a message and the byte offset it is about.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LexError {
    pub message: String,
    pub offset: usize,
}

fn lex_err<T>(message: impl Into<String>, offset: usize) -> Result<T, LexError> {
    Err(LexError {
        message: message.into(),
        offset,
    })
}

/// InfluxQL's whitespace (1.x reads `\r` and `\r\n` as a newline).
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Letters that continue a duration (`µ` and the Greek `μ` are both micro).
fn is_duration_letter(c: char) -> bool {
    c.is_ascii_alphabetic() || c == 'µ' || c == 'μ'
}

/// The scanner over one query text.
pub(crate) struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    /// Whether the last thing scanned (whitespace, a bare word, a `--` comment) ran into the
    /// end of the text. InfluxDB 1.x's scanner then reports `EOF` one character further on
    /// ("SELECT" → "found EOF ... at line 1, char 8"); we reproduce its positions exactly.
    hit_end: bool,
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Lexer {
            text,
            pos: 0,
            hit_end: false,
        }
    }

    fn peek_char(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        let mut chars = self.text[self.pos..].chars();
        chars.next();
        chars.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek_char()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Moves back to `offset` (a token start the parser peeked), to rescan from there.
    pub(crate) fn reset(&mut self, offset: usize) {
        self.pos = offset.min(self.text.len());
        self.hit_end = false;
    }

    /// Skips whitespace and comments.
    fn skip_trivia(&mut self) -> Result<(), LexError> {
        loop {
            match self.peek_char() {
                Some(c) if is_space(c) => {
                    while matches!(self.peek_char(), Some(c) if is_space(c)) {
                        self.bump();
                    }
                    self.hit_end = self.pos == self.text.len();
                }
                Some('-') if self.peek_second() == Some('-') => {
                    match self.text[self.pos..].find('\n') {
                        Some(i) => {
                            self.pos += i + 1;
                            self.hit_end = false;
                        }
                        None => {
                            self.pos = self.text.len();
                            self.hit_end = true;
                        }
                    }
                }
                Some('/') if self.peek_second() == Some('*') => {
                    let start = self.pos;
                    match self.text[self.pos + 2..].find("*/") {
                        Some(i) => {
                            self.pos += 2 + i + 2;
                            self.hit_end = false;
                        }
                        None => return lex_err("unterminated comment", start),
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// The next token. At the end of the text this is `EOF`, positioned where InfluxDB 1.x
    /// puts it (one character past the end after whitespace, a bare word or a `--` comment).
    pub(crate) fn next_token(&mut self) -> Result<Token, LexError> {
        self.skip_trivia()?;
        let start = self.pos;
        let Some(c) = self.bump() else {
            let start = self.text.len() + usize::from(self.hit_end);
            return Ok(Token {
                kind: TokenKind::Eof,
                start,
            });
        };
        self.hit_end = false;
        let kind = match c {
            c if is_ident_start(c) => {
                while matches!(self.peek_char(), Some(c) if is_ident_char(c)) {
                    self.bump();
                }
                self.hit_end = self.pos == self.text.len();
                let word = &self.text[start..self.pos];
                match keyword(word) {
                    Some("TRUE") => TokenKind::Bool(true),
                    Some("FALSE") => TokenKind::Bool(false),
                    Some(k) => TokenKind::Keyword(k),
                    None => TokenKind::Ident(word.to_string()),
                }
            }
            '"' => TokenKind::Ident(self.scan_quoted('"', start)?),
            '\'' => TokenKind::Str(self.scan_quoted('\'', start)?),
            c if c.is_ascii_digit() => self.scan_number(start),
            '.' if matches!(self.peek_char(), Some(d) if d.is_ascii_digit()) => {
                self.scan_number(start)
            }
            '.' => TokenKind::Dot,
            '$' => {
                while matches!(self.peek_char(), Some(c) if is_ident_char(c)) {
                    self.bump();
                }
                return lex_err(
                    format!(
                        "bound parameters are not supported: {}",
                        &self.text[start..self.pos]
                    ),
                    start,
                );
            }
            '+' => TokenKind::Add,
            '-' => TokenKind::Sub,
            '*' => TokenKind::Mul,
            '/' => TokenKind::Div,
            '%' => TokenKind::Mod,
            '&' => TokenKind::BitAnd,
            '|' => TokenKind::BitOr,
            '^' => TokenKind::BitXor,
            '=' => self.either('~', TokenKind::EqRegex, TokenKind::Eq),
            '!' => match self.peek_char() {
                Some('=') => {
                    self.bump();
                    TokenKind::NotEq
                }
                Some('~') => {
                    self.bump();
                    TokenKind::NotEqRegex
                }
                _ => TokenKind::Illegal("!".to_string()),
            },
            '>' => self.either('=', TokenKind::GtEq, TokenKind::Gt),
            '<' => match self.peek_char() {
                Some('=') => {
                    self.bump();
                    TokenKind::LtEq
                }
                Some('>') => {
                    self.bump();
                    TokenKind::NotEq
                }
                _ => TokenKind::Lt,
            },
            '(' => TokenKind::LParen,
            ')' => TokenKind::RParen,
            ',' => TokenKind::Comma,
            ';' => TokenKind::Semicolon,
            ':' => self.either(':', TokenKind::DoubleColon, TokenKind::Colon),
            other => TokenKind::Illegal(other.to_string()),
        };
        Ok(Token { kind, start })
    }

    /// `second` follows: consume it and return `yes`; otherwise `no`.
    fn either(&mut self, second: char, yes: TokenKind, no: TokenKind) -> TokenKind {
        if self.peek_char() == Some(second) {
            self.bump();
            yes
        } else {
            no
        }
    }

    /// The rest of a quoted string or identifier (the opening quote is consumed), unescaped:
    /// `\n`, `\\`, `\'` and `\"` are the escapes; a raw newline or the end of the text
    /// before the closing quote is an error.
    fn scan_quoted(&mut self, quote: char, start: usize) -> Result<String, LexError> {
        let what = if quote == '"' {
            "quoted identifier"
        } else {
            "string"
        };
        let mut out = String::new();
        loop {
            let at = self.pos;
            match self.bump() {
                None | Some('\n') => return lex_err(format!("unterminated {what}"), start),
                Some(c) if c == quote => return Ok(out),
                Some('\\') => match self.bump() {
                    Some('n') => out.push('\n'),
                    Some('\\') => out.push('\\'),
                    Some('\'') => out.push('\''),
                    Some('"') => out.push('"'),
                    None => return lex_err(format!("unterminated {what}"), start),
                    Some(other) => return lex_err(format!("bad escape: \\{other}"), at),
                },
                Some(c) => out.push(c),
            }
        }
    }

    /// A number or duration; the first character (a digit or `.`) is consumed.
    fn scan_number(&mut self, start: usize) -> TokenKind {
        while matches!(self.peek_char(), Some(d) if d.is_ascii_digit()) {
            self.bump();
        }
        let leading_dot = self.text[start..].starts_with('.');
        if leading_dot || self.peek_char() == Some('.') {
            if !leading_dot {
                self.bump(); // the '.'; `100.` is the float 100
            }
            while matches!(self.peek_char(), Some(d) if d.is_ascii_digit()) {
                self.bump();
            }
            return TokenKind::Number(self.text[start..self.pos].to_string());
        }
        if matches!(self.peek_char(), Some(c) if is_duration_letter(c)) {
            while matches!(self.peek_char(), Some(c) if is_duration_letter(c) || c.is_ascii_digit())
            {
                self.bump();
            }
            return TokenKind::Duration(self.text[start..self.pos].to_string());
        }
        TokenKind::Integer(self.text[start..self.pos].to_string())
    }

    /// A regular expression starting at `start`, which holds a `/`: the pattern up to the
    /// next unescaped `/`. `\/` is an escaped slash; any other backslash is kept as written
    /// (for the regex engine), as in InfluxDB 1.x.
    pub(crate) fn scan_regex(&mut self, start: usize) -> Result<String, LexError> {
        self.reset(start);
        if self.bump() != Some('/') {
            return lex_err("expected regex", start);
        }
        let mut out = String::new();
        loop {
            match self.bump() {
                None | Some('\n') => return lex_err("unterminated regex", start),
                Some('/') => return Ok(out),
                Some('\\') if self.peek_char() == Some('/') => {
                    self.bump();
                    out.push('/');
                }
                Some(c) => out.push(c),
            }
        }
    }
}

/// The 1-based line and character (counted in Unicode scalar values, as 1.x counts runes) of
/// byte `offset` in `text`. `\r\n` and a lone `\r` end a line like `\n`. An offset past the
/// end counts the extra bytes as characters (the EOF convention of [`Lexer::next_token`]).
pub(crate) fn line_char(text: &str, offset: usize) -> (usize, usize) {
    let end = offset.min(text.len());
    let mut line = 1;
    let mut char = 1;
    let mut chars = text.get(..end).unwrap_or(text).chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' | '\r' => {
                line += 1;
                char = 1;
            }
            _ => char += 1,
        }
    }
    (line, char + (offset - end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<TokenKind> {
        let mut lexer = Lexer::new(text);
        let mut out = Vec::new();
        loop {
            let tok = lexer.next_token().expect("lexes");
            if tok.kind == TokenKind::Eof {
                return out;
            }
            out.push(tok.kind);
        }
    }

    fn lex_error(text: &str) -> LexError {
        let mut lexer = Lexer::new(text);
        loop {
            match lexer.next_token() {
                Ok(tok) if tok.kind == TokenKind::Eof => panic!("{text:?} lexed without error"),
                Ok(_) => {}
                Err(e) => return e,
            }
        }
    }

    #[test]
    fn keywords_are_case_insensitive_and_identifiers_are_not_keywords() {
        assert_eq!(
            kinds("select From cpu"),
            vec![
                TokenKind::Keyword("SELECT"),
                TokenKind::Keyword("FROM"),
                TokenKind::Ident("cpu".into())
            ]
        );
        assert_eq!(kinds(r#""from""#), vec![TokenKind::Ident("from".into())]);
        assert_eq!(
            kinds("TRUE false"),
            vec![TokenKind::Bool(true), TokenKind::Bool(false)]
        );
    }

    #[test]
    fn quoted_identifiers_and_strings_unescape() {
        assert_eq!(
            kinds(r#""a \"b\" \\ c\n""#),
            vec![TokenKind::Ident("a \"b\" \\ c\n".into())]
        );
        assert_eq!(
            kinds(r#"'it\'s \"x\"'"#),
            vec![TokenKind::Str("it's \"x\"".into())]
        );
        assert_eq!(kinds("''"), vec![TokenKind::Str(String::new())]);
    }

    #[test]
    fn numbers_integers_and_durations() {
        assert_eq!(
            kinds("1 1.0 .5 100. 10s 1h30m 5µ 10.5h"),
            vec![
                TokenKind::Integer("1".into()),
                TokenKind::Number("1.0".into()),
                TokenKind::Number(".5".into()),
                TokenKind::Number("100.".into()),
                TokenKind::Duration("10s".into()),
                TokenKind::Duration("1h30m".into()),
                TokenKind::Duration("5µ".into()),
                TokenKind::Number("10.5".into()),
                TokenKind::Ident("h".into()),
            ]
        );
    }

    #[test]
    fn operators() {
        assert_eq!(
            kinds("+ - * / % & | ^ = != <> =~ !~ < <= > >= ( ) , : :: ; ."),
            vec![
                TokenKind::Add,
                TokenKind::Sub,
                TokenKind::Mul,
                TokenKind::Div,
                TokenKind::Mod,
                TokenKind::BitAnd,
                TokenKind::BitOr,
                TokenKind::BitXor,
                TokenKind::Eq,
                TokenKind::NotEq,
                TokenKind::NotEq,
                TokenKind::EqRegex,
                TokenKind::NotEqRegex,
                TokenKind::Lt,
                TokenKind::LtEq,
                TokenKind::Gt,
                TokenKind::GtEq,
                TokenKind::LParen,
                TokenKind::RParen,
                TokenKind::Comma,
                TokenKind::Colon,
                TokenKind::DoubleColon,
                TokenKind::Semicolon,
                TokenKind::Dot,
            ]
        );
    }

    #[test]
    fn comments_are_skipped() {
        assert_eq!(
            kinds("a -- the rest\n b /* x \n y */ c --"),
            vec![
                TokenKind::Ident("a".into()),
                TokenKind::Ident("b".into()),
                TokenKind::Ident("c".into())
            ]
        );
        assert_eq!(lex_error("a /* open").message, "unterminated comment");
    }

    #[test]
    fn bad_strings_and_escapes() {
        let e = lex_error("x 'abc");
        assert_eq!((e.message.as_str(), e.offset), ("unterminated string", 2));
        let e = lex_error("'a\nb'");
        assert_eq!(e.message, "unterminated string");
        let e = lex_error(r"'a\qb'");
        assert_eq!((e.message.as_str(), e.offset), (r"bad escape: \q", 2));
        assert_eq!(
            lex_error(r#""abc"#).message,
            "unterminated quoted identifier"
        );
        assert!(lex_error("$host").message.contains("$host"));
    }

    #[test]
    fn regexes_are_scanned_on_request() {
        let mut lexer = Lexer::new(r"/a\/b\d+/ x");
        assert_eq!(lexer.scan_regex(0).expect("regex"), r"a/b\d+");
        assert_eq!(
            lexer.next_token().expect("token").kind,
            TokenKind::Ident("x".into())
        );
        // `\\/` is a backslash followed by an escaped slash, as in 1.x
        let mut lexer = Lexer::new(r"/a\\/b/");
        assert_eq!(lexer.scan_regex(0).expect("regex"), r"a\/b");
        let mut lexer = Lexer::new("/abc");
        assert_eq!(
            lexer.scan_regex(0).expect_err("unterminated").message,
            "unterminated regex"
        );
    }

    #[test]
    fn eof_positions_follow_influxdb() {
        let eof = |text: &str| {
            let mut lexer = Lexer::new(text);
            loop {
                let tok = lexer.next_token().expect("lexes");
                if tok.kind == TokenKind::Eof {
                    return line_char(text, tok.start);
                }
            }
        };
        assert_eq!(eof(""), (1, 1));
        assert_eq!(eof("SELECT"), (1, 8));
        assert_eq!(eof("a ="), (1, 4));
        assert_eq!(eof("a,"), (1, 3));
        assert_eq!(eof("ON "), (1, 5));
        assert_eq!(eof("a\nb"), (2, 3));
        assert_eq!(eof("'x'"), (1, 4));
    }

    #[test]
    fn line_and_char_count_characters_and_line_breaks() {
        assert_eq!(line_char("abc", 0), (1, 1));
        assert_eq!(line_char("abc", 2), (1, 3));
        assert_eq!(line_char("a\nbc", 3), (2, 2));
        assert_eq!(line_char("a\r\nbc", 4), (2, 2));
        assert_eq!(line_char("µµx", 4), (1, 3));
    }
}
