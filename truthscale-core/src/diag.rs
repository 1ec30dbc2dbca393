//! Diagnostics: what the core noticed instead of panicking or emitting NaN.

use crate::model::{EntityId, Field};
use std::collections::BTreeMap;
use std::fmt;

/// A closed set of reasons, usable as a low-cardinality label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DiagnosticKind {
    /// A NaN or infinite reading was dropped.
    NonFinite,
    /// A reading outside its physical range was clamped or dropped.
    OutOfRange,
    /// A DCGM/NVML sentinel ("blank", "not supported") was recognised and dropped.
    Sentinel,
    /// A monotonic counter went backwards (driver reload, wrap).
    CounterReset,
    /// A sample was not later than the previous one for the same entity.
    NonIncreasingTime,
    /// Time between two samples was much longer than the interval; only one interval was counted.
    Gap,
    /// The GPU model is not in the catalog: metrics that need a peak are omitted.
    UnknownModel,
    /// The reported busy fraction was below the effective compute fraction (window misalignment).
    NegativeGap,
    /// A profiling reading of a window after a fatal XID was dropped: not trusted.
    UntrustedAfterXid,
}

impl DiagnosticKind {
    /// Stable snake_case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DiagnosticKind::NonFinite => "non_finite",
            DiagnosticKind::OutOfRange => "out_of_range",
            DiagnosticKind::Sentinel => "sentinel",
            DiagnosticKind::CounterReset => "counter_reset",
            DiagnosticKind::NonIncreasingTime => "non_increasing_time",
            DiagnosticKind::Gap => "gap",
            DiagnosticKind::UnknownModel => "unknown_model",
            DiagnosticKind::NegativeGap => "negative_gap",
            DiagnosticKind::UntrustedAfterXid => "untrusted_after_xid",
        }
    }
}

/// Diagnostics counted by kind, the first few kept whole: what a reader of many samples
/// says of them (`analyze`'s report, `explain --replay`'s note).
#[derive(Debug, Clone, Default)]
pub struct DiagnosticTally {
    counts: BTreeMap<DiagnosticKind, u64>,
    first: Vec<String>,
    keep: usize,
}

impl DiagnosticTally {
    /// A tally that keeps the first `keep` diagnostics whole.
    #[must_use]
    pub fn keeping(keep: usize) -> DiagnosticTally {
        DiagnosticTally {
            keep,
            ..DiagnosticTally::default()
        }
    }

    /// Count `d`, and keep it whole while fewer than `keep` are.
    pub fn add(&mut self, d: &Diagnostic) {
        *self.counts.entry(d.kind).or_default() += 1;
        if self.first.len() < self.keep {
            self.first.push(d.to_string());
        }
    }

    /// The counts, by kind name in the kinds' order.
    pub fn counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts.iter().map(|(k, n)| (k.as_str(), *n))
    }

    /// The first diagnostics, whole.
    #[must_use]
    pub fn first(&self) -> &[String] {
        &self.first
    }

    /// Whether nothing was counted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

/// Something the core noticed about one entity's readings.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    /// What kind of problem.
    pub kind: DiagnosticKind,
    /// Which entity, when known.
    pub entity: Option<EntityId>,
    /// Which field, when one is concerned.
    pub field: Option<Field>,
    /// Human detail.
    pub detail: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.as_str())?;
        if let Some(e) = &self.entity {
            write!(f, " [{e}]")?;
        }
        if let Some(field) = self.field {
            write!(f, " {}", field.name())?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}
