//! The answers of the Prometheus HTTP API: the JSON envelope, a range query's matrix and
//! its sample values, and the warnings kept from them.

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// The Prometheus HTTP API envelope.
#[derive(Debug, Deserialize)]
pub(in crate::history) struct Envelope<T> {
    pub(in crate::history) status: String,
    pub(in crate::history) data: Option<T>,
    #[serde(rename = "errorType")]
    pub(in crate::history) error_type: Option<String>,
    pub(in crate::history) error: Option<String>,
    #[serde(default)]
    pub(in crate::history) warnings: Vec<String>,
}

impl<T> Envelope<T> {
    pub(in crate::history) fn error_text(&self) -> Option<String> {
        let e = self.error.as_deref()?;
        Some(match &self.error_type {
            Some(t) => format!("{t}: {e}"),
            None => e.to_owned(),
        })
    }
}

/// `data` of a range query.
#[derive(Debug, Deserialize)]
pub(in crate::history) struct Matrix {
    #[serde(rename = "resultType")]
    pub(in crate::history) result_type: String,
    pub(in crate::history) result: Vec<RangeSeries>,
}

#[derive(Debug, Deserialize)]
pub(in crate::history) struct RangeSeries {
    pub(in crate::history) metric: BTreeMap<String, String>,
    #[serde(default)]
    pub(in crate::history) values: Vec<(f64, PromValue)>,
}

/// A sample value as the API writes it, a string (`"0.5"`, `"NaN"`, `"+Inf"`), decoded
/// straight to a number: no string is kept per point. `None`: not a number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::history) struct PromValue(pub(in crate::history) Option<f64>);

impl<'de> Deserialize<'de> for PromValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = PromValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sample value as a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PromValue, E> {
                // Prometheus writes NaN and ±Inf as strings too; Rust parses them, and the
                // mapping turns them into blanks.
                Ok(PromValue(v.parse::<f64>().ok()))
            }
        }
        d.deserialize_str(V)
    }
}

/// The distinct warnings kept from the answers (Thanos and Mimir add one per partial
/// answer; one report once collected 400 003).
pub(in crate::history) const MAX_WARNINGS: usize = 20;

/// The longest warning kept, in characters.
const MAX_WARNING_CHARS: usize = 500;

/// The answers' warnings: the first [`MAX_WARNINGS`] distinct ones (each cut to
/// [`MAX_WARNING_CHARS`]), and how many there were in all.
#[derive(Debug, Default)]
pub(in crate::history) struct Warnings {
    pub(in crate::history) kept: BTreeSet<String>,
    /// Every warning seen, repeats included.
    pub(in crate::history) seen: u64,
}

impl Warnings {
    /// Take an answer's warnings.
    pub(in crate::history) fn add(&mut self, warnings: Vec<String>) {
        for w in warnings {
            self.seen += 1;
            if self.kept.len() < MAX_WARNINGS {
                let cut: String = w.chars().take(MAX_WARNING_CHARS).collect();
                self.kept.insert(cut);
            }
        }
    }

    /// The lines to print: the kept warnings, then one line for the rest.
    pub(in crate::history) fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self.kept.iter().cloned().collect();
        let shown = self.kept.len() as u64;
        if self.seen > shown {
            out.push(format!(
                "{} warnings in all from the answers ({} distinct shown above)",
                self.seen, shown
            ));
        }
        out
    }
}
