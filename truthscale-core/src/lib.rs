//! # truthscale-core
//!
//! Turns raw GPU counters into metrics that mean something: the effective compute
//! fraction, roofline saturation, how much the reported utilization is inflated, and the
//! phase (idle, prefill, decode, mixed, stalled, underloaded), each with its fidelity tier.
//!
//! The crate is pure: it does no I/O and never reads the clock. Time is an input.
//!
//! ```
//! use truthscale_core::model::{EntityId, EntitySample, Field, Readings, Sample, Timestamp};
//! use truthscale_core::tracker::Deriver;
//! use truthscale_core::derive::DeriveConfig;
//!
//! let mut r = Readings::default();
//! r.set_value(Field::ReportedUtil, 1.0);
//! r.set_value(Field::SmActive, 1.0 / 132.0);
//! r.set_value(Field::TensorActive, 0.0);
//! r.set_value(Field::DramActive, 0.0);
//! let e = EntitySample { id: EntityId { gpu: Some(0), ..Default::default() }, readings: r, ..Default::default() };
//! let mut d = Deriver::new(DeriveConfig::default(), Some(1.0));
//! let out = d.observe(&Sample { taken: Timestamp(1_000), entities: vec![e] });
//! let w = &out.windows[0];
//! assert_eq!(w.phase.map(|p| p.as_str()), Some("stalled"));
//! assert_eq!(w.totals.busy_seconds, 1.0);
//! ```
#![warn(missing_docs)]
// The metric catalog is one `macro_rules!` table: each family is a recursion step.
#![recursion_limit = "256"]

pub mod analysis;
pub mod catalog;
pub mod causes;
pub mod cycles;
pub mod derive;
pub mod diag;
pub mod energy;
pub mod exposition;
pub mod fleet;
pub mod gpus;
pub mod health;
pub mod model;
pub mod parse;
pub mod phase;
pub mod rightsizing;
pub mod serving;
pub mod share;
pub mod showback;
pub mod sim;
pub mod stragglers;
pub mod tracker;
pub mod verdict;
