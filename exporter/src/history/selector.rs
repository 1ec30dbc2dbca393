//! `--selector` checked here, before any query: its matchers are parsed as PromQL writes them
//! (names, operators, quoted values with PromQL's escapes, regular expressions in RE2's
//! syntax, checked by `regex-syntax`), and a mistake is named by its column in the user's own
//! text, with the selector as it should be written. Without this, Prometheus answered
//! `1:2182: parse error` about a query the user never wrote. A full PromQL parser would add a
//! generated grammar to every build for a label matcher list (ADR 0007).

use anyhow::bail;

/// A mistake in a selector: the 0-based byte offset in the text checked, and what is wrong.
#[derive(Debug, PartialEq, Eq)]
struct Mistake {
    at: usize,
    what: String,
}

/// Walks a label matcher list `{name op "value", …}` (the braces optional), writing the
/// list as it should be (each value quoted) as it goes.
struct Scan<'a> {
    text: &'a str,
    at: usize,
    /// The matchers as they should be written.
    fixed: Vec<String>,
    /// Whether a value was written without quotes.
    unquoted: bool,
    /// The matchers read: name, operator and the value's text (unquoted).
    read: Vec<Matcher>,
}

/// One label matcher of a selector: the label's name, the operator (`=`, `!=`, `=~` or
/// `!~`) and the value's text, its quotes and escapes undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Matcher {
    pub(super) name: String,
    pub(super) op: &'static str,
    pub(super) value: String,
}

/// The matchers of a list checked by [`check`] (`inner`: without braces), each as
/// Prometheus reads it; `None` when it is not a valid list.
pub(super) fn matchers(inner: &str) -> Option<Vec<Matcher>> {
    let mut scan = Scan::new(inner);
    scan.list().ok()?;
    Some(scan.read)
}

impl<'a> Scan<'a> {
    fn new(text: &'a str) -> Scan<'a> {
        Scan {
            text,
            at: 0,
            fixed: Vec::new(),
            unquoted: false,
            read: Vec::new(),
        }
    }
}

impl Scan<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        self.at = self.text.len() - self.rest().trim_start().len();
    }

    fn mistake(&self, what: impl Into<String>) -> Mistake {
        Mistake {
            at: self.at,
            what: what.into(),
        }
    }

    /// A run of characters of a label name, or of an unquoted value, from here.
    fn word(&mut self, value: bool) -> &str {
        let start = self.at;
        let len = self
            .rest()
            .find(|c: char| {
                !(c.is_ascii_alphanumeric() || c == '_' || (value && !",}\"'` ".contains(c)))
            })
            .unwrap_or(self.rest().len());
        self.at += len;
        &self.text[start..self.at]
    }

    /// A quoted string from here (`"…"`, `'…'` or `` `…` ``), as written.
    fn quoted(&mut self) -> Result<&str, Mistake> {
        let start = self.at;
        let quote = self.rest().chars().next().unwrap_or('"');
        let mut escaped = false;
        for (i, c) in self.rest().char_indices().skip(1) {
            if c == quote && !escaped {
                self.at += i + 1;
                return Ok(&self.text[start..self.at]);
            }
            escaped = !escaped && c == '\\' && quote != '`';
        }
        Err(self.mistake(format!("this value's {quote} is never closed")))
    }

    /// One matcher `name op value`.
    fn matcher(&mut self) -> Result<(), Mistake> {
        let name = self.word(false).to_owned();
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(self.mistake(
                "expected a label name (letters, digits and _, not starting with a digit)",
            ));
        }
        self.skip_space();
        let op = ["=~", "!~", "!=", "="]
            .into_iter()
            .find(|op| self.rest().starts_with(op))
            .ok_or_else(|| self.mistake(format!("expected =, !=, =~ or !~ after `{name}`")))?;
        self.at += op.len();
        self.skip_space();
        let value_at = self.at;
        let value = if self.rest().starts_with(['"', '\'', '`']) {
            let raw = self.quoted()?.to_owned();
            let text = unquote(&raw).map_err(|what| Mistake { at: value_at, what })?;
            if op.ends_with('~') {
                regex_syntax::Parser::new()
                    .parse(&format!("^(?:{text})$"))
                    .map_err(|e| Mistake {
                        at: value_at,
                        what: format!(
                            "the regular expression {raw} does not compile: {}",
                            one_line(&e)
                        ),
                    })?;
            }
            self.read.push(Matcher {
                name: name.clone(),
                op,
                value: text,
            });
            raw
        } else {
            let word = self.word(true).to_owned();
            if word.is_empty() {
                return Err(self.mistake(format!("expected a quoted value after `{name}{op}`")));
            }
            self.unquoted = true;
            self.fixed.push(format!("{name}{op}{word:?}"));
            return Err(Mistake {
                at: value_at,
                what: format!("the value `{word}` must be in double quotes: {name}{op}{word:?}"),
            });
        };
        self.fixed.push(format!("{name}{op}{value}"));
        Ok(())
    }

    /// The whole list; the first mistake stops it.
    fn list(&mut self) -> Result<(), Mistake> {
        self.skip_space();
        let braced = self.rest().starts_with('{');
        if braced {
            self.at += 1;
        }
        loop {
            self.skip_space();
            if self.rest().is_empty() || (braced && self.rest().starts_with('}')) {
                break;
            }
            self.matcher()?;
            self.skip_space();
            if self.rest().starts_with(',') {
                self.at += 1;
            } else if !self.rest().is_empty() && !self.rest().starts_with('}') {
                return Err(self.mistake("expected `,` between matchers"));
            }
        }
        Ok(())
    }

    /// The rest of the list after a mistake in a value, to write the whole list fixed:
    /// each later matcher as written, or quoted.
    fn finish(&mut self) {
        while self.at < self.text.len() {
            self.skip_space();
            if self.rest().starts_with([',', '}']) {
                self.at += 1;
                continue;
            }
            let before = self.at;
            if self.matcher().is_err() && !self.unquoted || self.at == before {
                return;
            }
        }
    }
}

/// Check the label matchers of `--selector` (`selector` as given; `inner` its matchers
/// without braces). The error names the column in `selector`, and when values lack their
/// quotes, the selector with them.
///
/// # Errors
/// A selector that is not a PromQL label matcher list.
pub(super) fn check(selector: &str, inner: &str) -> anyhow::Result<()> {
    if inner.is_empty() {
        return Ok(());
    }
    let mut scan = Scan::new(selector);
    let mistake = match scan.list() {
        Ok(()) => return Ok(()),
        Err(m) => m,
    };
    scan.finish();
    let column = selector[..mistake.at].chars().count() + 1;
    let hint = if scan.unquoted {
        format!("; write --selector '{{{}}}'", scan.fixed.join(","))
    } else {
        "; write label matchers like --selector '{namespace=\"prod\",pod=~\"llm-.*\"}'".to_owned()
    };
    bail!(
        "--selector '{selector}': column {column}: {}{hint}\n  {selector}\n  {}^",
        mistake.what,
        " ".repeat(column - 1)
    )
}

/// A quoted PromQL string's text: a raw string (`` `…` ``) as it is; a `"…"` or `'…'` one
/// with Go's escapes (`\n`, `\t`, `\\`, `\"`, `\xHH`, `\uHHHH`, octal …), an unknown
/// escape refused as PromQL refuses it.
fn unquote(raw: &str) -> Result<String, String> {
    let quote = raw.chars().next().unwrap_or('"');
    let body = &raw[quote.len_utf8()..raw.len() - quote.len_utf8()];
    if quote == '`' {
        return Ok(body.to_owned());
    }
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next().ok_or("a value ends in a lone \\")?;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '"' | '\'' => Some(e),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            continue;
        }
        let (digits, radix) = match e {
            'x' => (2, 16),
            'u' => (4, 16),
            'U' => (8, 16),
            '0'..='7' => (2, 8),
            _ => {
                return Err(format!(
                    "unknown escape \\{e} in {raw} (write \\\\{e} for a backslash, or use `…` quotes)"
                ));
            }
        };
        let mut code: String = if radix == 8 {
            e.to_string()
        } else {
            String::new()
        };
        code.extend(chars.by_ref().take(digits));
        let c = u32::from_str_radix(&code, radix)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| {
                format!(
                    "bad escape \\{e}{} in {raw}",
                    &code[usize::from(radix == 8)..]
                )
            })?;
        out.push(c);
    }
    Ok(out)
}

/// An error's text on one line.
fn one_line(e: &impl std::fmt::Display) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::check;

    fn err(selector: &str, inner: &str) -> String {
        check(selector, inner).unwrap_err().to_string()
    }

    /// `--selector 'namespace=chat'` used to reach Prometheus and come back as
    /// `1:2182: parse error`: now it is refused here, at its column, with the fix.
    #[test]
    fn a_bad_selector_names_its_column_and_the_fix() {
        assert_eq!(
            err("namespace=chat", "namespace=chat"),
            "--selector 'namespace=chat': column 11: the value `chat` must be in double quotes: \
             namespace=\"chat\"; write --selector '{namespace=\"chat\"}'\n  namespace=chat\n            ^"
        );
        let e = err(
            "{pod=~\"llm-.*\", namespace=chat}",
            "pod=~\"llm-.*\", namespace=chat",
        );
        assert!(
            e.starts_with(
                "--selector '{pod=~\"llm-.*\", namespace=chat}': column 27: the value `chat`"
            ),
            "{e}"
        );
        assert!(
            e.contains("; write --selector '{pod=~\"llm-.*\",namespace=\"chat\"}'"),
            "{e}"
        );
        let e = err("{namespace:\"chat\"}", "namespace:\"chat\"");
        assert!(
            e.starts_with("--selector '{namespace:\"chat\"}': column 11: expected =, !=, =~ or !~ after `namespace`"),
            "{e}"
        );
        let e = err("{namespace=\"chat}", "namespace=\"chat");
        assert!(
            e.contains("column 12: this value's \" is never closed"),
            "{e}"
        );
        // A regular expression that does not compile, at its value's column.
        let e = err("{pod=~\"(\"}", "pod=~\"(\"");
        assert!(
            e.starts_with(
                "--selector '{pod=~\"(\"}': column 7: the regular expression \"(\" does not compile"
            ),
            "{e}"
        );
        // PromQL's escapes: an unknown one refused, as Prometheus refuses it.
        let e = err("{pod=~\"llm-\\d+\"}", "pod=~\"llm-\\d+\"");
        assert!(e.contains("column 7: unknown escape \\d"), "{e}");
        for good in [
            "namespace=\"chat\"",
            "pod=~\"llm-.*\",namespace!=\"kube-system\"",
            "a='b', c!~`d.*`",
            "job=\"x\",",
            "pod=~\"llm-\\\\d+\"",
            "pod=~`llm-\\d+`",
            "a=\"tab\\there \\u00e9 \\x41 \\101\"",
        ] {
            check(good, good).unwrap();
        }
        check("", "").unwrap();
    }
}

#[cfg(test)]
mod unquote_tests {
    use super::unquote;

    #[test]
    fn promql_strings_read_as_go_reads_them() {
        assert_eq!(unquote("\"a\\\\b\"").unwrap(), "a\\b");
        assert_eq!(unquote("'it\\'s'").unwrap(), "it's");
        assert_eq!(unquote("`raw \\d`").unwrap(), "raw \\d");
        assert_eq!(
            unquote("\"\\x41\\u00e9\\U0001F600\\101\\n\"").unwrap(),
            "Aé😀A\n"
        );
        assert!(
            unquote("\"\\d\"")
                .unwrap_err()
                .contains("unknown escape \\d")
        );
        assert!(
            unquote("\"\\xZZ\"")
                .unwrap_err()
                .contains("bad escape \\xZZ")
        );
    }
}
