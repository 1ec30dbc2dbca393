//! The queries of each chunk ([`Column`]): one per metric name and, at a coarse step with
//! peaks asked for, one per band of each activity ratio the sizing reads; and which samples
//! each feeds ([`SampleKind`]).

use super::holders::HolderColumn;
use super::query::{SIZING_RATIOS, Summary, field_of, series_query};
use super::{Family, History};
use truthscale_core::fleet::BANDS;
use truthscale_core::model::Field;
use truthscale_core::parse::dcgm_text;

/// Which of a step's samples [`History::feed_stats`] hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SampleKind {
    /// The step's sample: Prometheus' own at a fine step, the summaries (means, peak
    /// memory) at a coarse one.
    Step,
    /// At a coarse step with peaks asked for ([`History::read_peaks`]): band `j` of the
    /// same step ([`STEP_QUANTILES`](truthscale_core::fleet::STEP_QUANTILES)), with
    /// each activity ratio's p99 over the raw samples in it, after all of a chunk's
    /// [`SampleKind::Step`] samples.
    Peak(usize),
}

/// One query of each chunk: a metric name and how each step reads it.
#[derive(Debug, Clone)]
pub(super) struct Column {
    pub(super) name: String,
    /// `None`: the sample Prometheus evaluates at each step.
    pub(super) summary: Option<Summary>,
    /// Read for the [`SampleKind::Peak`] samples of this band only.
    pub(super) band: Option<usize>,
    /// Read for every kind: a series without bands of its own that the saturation of a band
    /// sample needs (the clocks).
    pub(super) shared: bool,
    /// A holder-pod signal from cAdvisor's series, joined onto the GPU series `name` names
    /// ([`History::read_holders`]): its answers are that signal's reading, not `name`'s.
    pub(super) holder: Option<HolderColumn>,
    /// Read only to decide the unit of a percent-or-ratio family at a coarse step: each
    /// step's largest raw sample ([`Column::of`]), fed to no sample.
    pub(super) evidence: bool,
}

impl Column {
    /// Whether the column's answers go into the samples of `kind`.
    pub(super) fn feeds(&self, kind: SampleKind) -> bool {
        match kind {
            SampleKind::Step => self.band.is_none() && !self.evidence,
            SampleKind::Peak(j) => self.band == Some(j) || self.shared,
        }
    }

    /// The columns of series `name` of `family`: its own (summarised when `summarizes`) and,
    /// at a coarse step, for a DCGM family whose unit its name does not prove (a percent or
    /// a 0..1 ratio), each step's largest raw sample. A mean of whole percents may be any
    /// fraction, so the means cannot tell the unit; the largest of them is a whole number
    /// for a percent, and a fraction up to 1 only for a ratio.
    pub(super) fn of(family: Family, name: String, summarizes: bool) -> Vec<Column> {
        let evidence =
            (summarizes && family == Family::DcgmExporter && dcgm_text::is_percent_or_ratio(&name))
                .then(|| Column {
                    name: name.clone(),
                    summary: Some(Summary::Max),
                    band: None,
                    shared: false,
                    holder: None,
                    evidence: true,
                });
        let own = Column {
            summary: summarizes.then(|| Summary::of(family, &name).0),
            name,
            band: None,
            shared: false,
            holder: None,
            evidence: false,
        };
        std::iter::once(own).chain(evidence).collect()
    }
}

impl History {
    /// The query of `column` over `matchers`: its series, summarised per step when the step
    /// is coarse.
    pub(super) fn column_query(&self, column: &Column, matchers: &str) -> String {
        if let Some(h) = &column.holder {
            return self.holder_query(h, matchers);
        }
        let selector = series_query(&column.name, matchers);
        match column.summary {
            Some(s) => s.wrap(&selector, self.range.step),
            None => selector,
        }
    }

    /// At a coarse step, also read the bands of each activity ratio the sizing uses
    /// ([`SIZING_RATIOS`]) over the raw samples in each step: the quantiles
    /// [`STEP_QUANTILES`](truthscale_core::fleet::STEP_QUANTILES), handed over as
    /// [`SampleKind::Peak`] samples of each band ([`BANDS`] more queries per ratio and
    /// chunk). Nothing changes at a fine step, whose samples are the raw ones.
    pub(crate) fn read_peaks(&mut self) {
        if !self.summarizes || self.columns.iter().any(|c| c.band.is_some()) {
            return;
        }
        let mut peaks = Vec::new();
        for c in self
            .columns
            .iter_mut()
            .filter(|c| c.holder.is_none() && !c.evidence)
        {
            c.shared = matches!(
                field_of(self.family, &c.name),
                Some(Field::SmClockMhz | Field::MemClockMhz)
            );
            let sizing = field_of(self.family, &c.name).is_some_and(|f| SIZING_RATIOS.contains(&f));
            if sizing && Summary::of(self.family, &c.name).1 {
                peaks.extend((0..BANDS).map(|j| Column {
                    name: c.name.clone(),
                    summary: Some(Summary::Band(j)),
                    band: Some(j),
                    shared: false,
                    holder: None,
                    evidence: false,
                }));
            }
        }
        self.columns.extend(peaks);
    }

    /// How a summarised step's time is shared between the bands read
    /// ([`History::read_peaks`]): `None` at a fine step, or before the bands are asked for.
    #[must_use]
    pub(crate) fn step_bands(&self) -> Option<truthscale_core::fleet::StepBands> {
        (self.summarizes && self.columns.iter().any(|c| c.band.is_some()))
            .then(|| truthscale_core::fleet::StepBands::for_samples(self.samples_per_step()))
    }
}
