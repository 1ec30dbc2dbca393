//! The answers of the Prometheus HTTP API: the JSON envelope, a range query's matrix and
//! its sample values, and the warnings kept from them.

use serde::Deserialize;
use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
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

/// `data` of a range query: its series, and the values of all of them in one list (one
/// allocation an answer, grown a few times, instead of one grown list per series: a report
/// decodes millions of series-chunks, and their small lists were most of its allocations).
#[derive(Debug)]
pub(in crate::history) struct Matrix {
    pub(in crate::history) result_type: String,
    pub(in crate::history) result: Vec<RangeSeries>,
    /// Every series' values, in the order of `result`.
    pub(in crate::history) values: Vec<(f64, PromValue)>,
}

/// A series' labels.
type Labels = BTreeMap<String, String>;

/// One series of a [`Matrix`]: its labels, and where its values are in the matrix's.
#[derive(Debug)]
pub(in crate::history) struct RangeSeries {
    pub(in crate::history) metric: Labels,
    pub(in crate::history) values: std::ops::Range<usize>,
}

impl Matrix {
    /// A matrix of `series` (labels and values), as an answer would decode to.
    #[cfg(test)]
    pub(in crate::history) fn of(series: Vec<(Labels, Vec<(f64, PromValue)>)>) -> Matrix {
        let mut values = Vec::new();
        let result = series
            .into_iter()
            .map(|(metric, v)| {
                let start = values.len();
                values.extend(v);
                RangeSeries {
                    metric,
                    values: start..values.len(),
                }
            })
            .collect();
        Matrix {
            result_type: "matrix".into(),
            result,
            values,
        }
    }

    /// The values of `series`, one of this matrix's.
    pub(in crate::history) fn values_of(&self, series: &RangeSeries) -> &[(f64, PromValue)] {
        self.values.get(series.values.clone()).unwrap_or_default()
    }
}

/// The keys of a matrix and of its series that are read; the others are skipped.
#[derive(Deserialize)]
#[serde(field_identifier)]
enum Key {
    #[serde(rename = "resultType")]
    ResultType,
    #[serde(rename = "result")]
    Result,
    #[serde(rename = "metric")]
    Metric,
    #[serde(rename = "values")]
    Values,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for Matrix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Matrix;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a range query's data")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Matrix, A::Error> {
                let (mut result_type, mut result, mut values) = (None, None, Vec::new());
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::ResultType => result_type = Some(map.next_value()?),
                        Key::Result => result = Some(map.next_value_seed(AllSeries(&mut values))?),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Matrix {
                    result_type: result_type
                        .ok_or_else(|| A::Error::missing_field("resultType"))?,
                    result: result.ok_or_else(|| A::Error::missing_field("result"))?,
                    values,
                })
            }
        }
        d.deserialize_map(V)
    }
}

/// A matrix's `result`: its series, their values appended to the list held.
struct AllSeries<'a>(&'a mut Vec<(f64, PromValue)>);

impl<'de> DeserializeSeed<'de> for AllSeries<'_> {
    type Value = Vec<RangeSeries>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for AllSeries<'_> {
    type Value = Vec<RangeSeries>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of series")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(s) = seq.next_element_seed(OneSeries(&mut *self.0))? {
            out.push(s);
        }
        Ok(out)
    }
}

/// One series of a matrix: its labels, its values appended to the list held.
struct OneSeries<'a>(&'a mut Vec<(f64, PromValue)>);

impl<'de> DeserializeSeed<'de> for OneSeries<'_> {
    type Value = RangeSeries;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for OneSeries<'_> {
    type Value = RangeSeries;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a series")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let start = self.0.len();
        let mut metric = None;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Metric => metric = Some(map.next_value()?),
                Key::Values => map.next_value_seed(Values(&mut *self.0))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(RangeSeries {
            metric: metric.ok_or_else(|| A::Error::missing_field("metric"))?,
            values: start..self.0.len(),
        })
    }
}

/// A series' `values`, appended to the list held.
struct Values<'a>(&'a mut Vec<(f64, PromValue)>);

impl<'de> DeserializeSeed<'de> for Values<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Values<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of [time, value] pairs")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(v) = seq.next_element::<(f64, PromValue)>()? {
            self.0.push(v);
        }
        Ok(())
    }
}

/// A sample value as the API writes it, a string (`"0.5"`, `"NaN"`, `"+Inf"`), decoded
/// straight to a number: no string is kept per point. A string that is no number (`"n/a"`,
/// which a Prometheus-compatible server may answer) is NaN: refused where it is read and
/// counted there, as Prometheus' own NaN is, never dropped in silence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::history) struct PromValue(pub(in crate::history) f64);

impl PromValue {
    /// The value a string of the API decodes to: NaN when it is no number.
    pub(in crate::history) fn parse(v: &str) -> PromValue {
        PromValue(v.parse::<f64>().unwrap_or(f64::NAN))
    }
}

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
                // mapping turns them into blanks (a string that is no number with them).
                Ok(PromValue::parse(v))
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
