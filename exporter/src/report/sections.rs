//! The sections of the report, in the order both renderers write them: the text
//! ([`super::text`]) and the page ([`super::html`]) each walk [`SECTIONS`] and lay out one
//! section at a time, their figures formatted by [`super::format`].

/// One section of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    /// Where the history came from, the window and its steps.
    Header,
    /// Where the GPU-hours went: the funnel from total to effective.
    Funnel,
    /// The fleet's sizing: GPU-equivalents over time, the pooled lower bound, the packing.
    Sizing,
    /// Workloads that can share a GPU.
    Colocation,
    /// Workloads that fit a MIG slice or a smaller model.
    Rightsizing,
    /// Workloads idle most of their measured time.
    Idle,
    /// Why GPUs wait: starved time by cause, and stragglers.
    Waits,
    /// GPUs and GPU-hours the packing frees.
    Savings,
    /// GPU-hours by group (`--by`), when asked.
    Showback,
    /// Each cluster sized on its own (`--cluster-label`), when asked; the page has none.
    Clusters,
    /// The notes on the analysis and on how the history was read.
    Notes,
    /// The method and its assumptions.
    Method,
}

/// Every section, in order.
pub(crate) const SECTIONS: [Section; 12] = [
    Section::Header,
    Section::Funnel,
    Section::Sizing,
    Section::Colocation,
    Section::Rightsizing,
    Section::Idle,
    Section::Waits,
    Section::Savings,
    Section::Showback,
    Section::Clusters,
    Section::Notes,
    Section::Method,
];

/// `report --idle`: where the history came from, the idle holders, and the notes on what
/// was missing or partial (a reclaimable list read from a partial answer says so).
pub(crate) const IDLE_ONLY: [Section; 3] = [Section::Header, Section::Idle, Section::Notes];
