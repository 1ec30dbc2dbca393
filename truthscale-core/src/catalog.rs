//! The metric catalog: every exported metric name, its type, help and extra labels.
//!
//! This is the single source of truth for names: the exposition encoder only accepts a
//! [`MetricDesc`] from here, and `docs/metrics.md` is checked against it by a test.
//! A family that is one reading of the source says which ([`MetricDesc::raw`]): the
//! exposition writes it from there, and `analyze --prometheus` reads it back from there.

use crate::model::Field;
use opentelemetry_semantic_conventions::attribute as sa;
use opentelemetry_semantic_conventions::metric as sm;

/// Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A monotonic total.
    Counter,
}

impl Kind {
    /// The `# TYPE` word.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// Which label set a metric carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Per GPU entity: `gpu`, `uuid`, `model`, MIG and pod labels.
    Gpu,
    /// About the exporter itself.
    Exporter,
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricDesc {
    /// Its id, for exhaustive matches.
    pub id: MetricId,
    /// Full name (counters end in `_total`).
    pub name: &'static str,
    /// Type.
    pub kind: Kind,
    /// `# HELP` text.
    pub help: &'static str,
    /// Label set.
    pub scope: Scope,
    /// Labels beyond the scope's own (e.g. `phase`).
    pub extra_labels: &'static [&'static str],
    /// How it is exported over OTLP (`None`: Prometheus only).
    pub otel: Option<OtelDesc>,
    /// The reading the family is, for a family that is one reading of the source
    /// (`None`: derived from several, or not a reading at all).
    pub raw: Option<Raw>,
}

/// A family that is one reading of the source ([`Field`]), in the exported unit.
///
/// The one description of these families: the exposition writes a
/// [`RawKind::PassThrough`] family as `reading × scale`, and readers of truthscale's own
/// series (`analyze --prometheus`) take every such family back as its reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Raw {
    /// The reading.
    pub field: Field,
    /// Factor from the reading's unit to the exported one (the SM clock, read in MHz and
    /// exported in Hz: `1e6`).
    pub scale: f64,
    /// Whether the exported value is the reading itself or an estimate of it.
    pub kind: RawKind,
}

/// How a [`Raw`] family's value relates to its reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawKind {
    /// Exported as is: the value is the window's reading times [`Raw::scale`].
    PassThrough,
    /// Derived from more than the reading, but the same quantity in the same unit (power
    /// over the window from the energy counter where there is one, else the power
    /// reading): read back as the reading, not written from it.
    Estimate,
}

impl Raw {
    /// The exported value of a reading: `reading × scale`.
    #[must_use]
    pub fn export(self, reading: f64) -> f64 {
        reading * self.scale
    }

    /// The reading of an exported value: `exported × (1 / scale)`. (`1.0 / 1e6` is the
    /// `f64` nearest 10⁻⁶, so this is `exported × 1e-6` for the SM clock, bit for bit.)
    #[must_use]
    pub fn read_back(self, exported: f64) -> f64 {
        exported * self.scale.recip()
    }
}

const fn raw(field: Field, scale: f64) -> Option<Raw> {
    Some(Raw {
        field,
        scale,
        kind: RawKind::PassThrough,
    })
}

const fn estimate(field: Field, scale: f64) -> Option<Raw> {
    Some(Raw {
        field,
        scale,
        kind: RawKind::Estimate,
    })
}

impl MetricDesc {
    /// Whether `names`, the label names of one sample of this family in order (the
    /// entity's, then the family's own, as [`crate::exposition::for_each_value`] gives
    /// them), are the ones the catalog declares.
    ///
    /// A GPU family's sample starts with the entity's labels: [`GPU_LABELS`] in that
    /// order, each at most once (an entity has the ones it has). The families of a device
    /// no single pod holds (`truthscale_gpu_allocation_info`, `truthscale_pod_*`) then add
    /// the holder's `pod`, `namespace` and `container`, in that order, where the entity has
    /// none: after the entity's `node`, where it has one. Then come exactly
    /// [`MetricDesc::extra_labels`], in order. One exception: on
    /// `truthscale_gpu_allocation_info`, `replica` is there only when the device id names
    /// one, and the allowlisted pod labels (`label_…`) follow it.
    ///
    /// # Errors
    /// What differs, with the family's name.
    pub fn check_labels(&self, names: &[&str]) -> Result<(), String> {
        /// The longest prefix of `names` in the order of `order`, each at most once and
        /// none in `seen`; returns its length.
        fn ordered_run(names: &[&str], order: &[&str], seen: &[&str]) -> usize {
            let mut next = 0;
            let mut n = 0;
            for name in names {
                match order[next..].iter().position(|l| l == name) {
                    Some(p) if !seen.contains(name) => {
                        next += p + 1;
                        n += 1;
                    }
                    _ => break,
                }
            }
            n
        }
        let mut rest = names;
        if self.scope == Scope::Gpu {
            let own = ordered_run(rest, GPU_LABELS, &[]);
            let holder = if matches!(
                self.id,
                MetricId::Gpu(
                    GpuMetric::GpuAllocation
                        | GpuMetric::PodEffectiveCompute
                        | GpuMetric::PodEffectiveComputeEstimate
                        | GpuMetric::PodEnergy
                        | GpuMetric::PodEnergyEstimate
                        | GpuMetric::PodMemoryUsed
                        | GpuMetric::PodCpuThrottled
                        | GpuMetric::PodCpuLimit
                        | GpuMetric::PodCpuWaiting
                        | GpuMetric::PodIoWaiting
                        | GpuMetric::PodIoStalled
                        | GpuMetric::PodMemoryStalled
                )
            ) {
                ordered_run(
                    &rest[own..],
                    &["pod", "namespace", "container"],
                    &rest[..own],
                )
            } else {
                0
            };
            rest = &rest[own + holder..];
        }
        let ok = if self.id == MetricId::Gpu(GpuMetric::GpuAllocation) {
            debug_assert_eq!(
                self.extra_labels,
                ["resource", "replica", "owner_kind", "owner_name"]
            );
            let after = rest.strip_prefix(&["resource"][..]);
            let after = after.map(|a| a.strip_prefix(&["replica"][..]).unwrap_or(a));
            let after = after.map(|a| {
                a.strip_prefix(&["owner_kind", "owner_name"][..])
                    .unwrap_or(a)
            });
            after.is_some_and(|a| a.iter().all(|n| n.starts_with("label_")))
        } else {
            rest == self.extra_labels
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{}: labels {names:?}, but the catalog declares {:?} then {:?}",
                self.name,
                match self.scope {
                    Scope::Gpu => GPU_LABELS,
                    Scope::Exporter => &[],
                },
                self.extra_labels
            ))
        }
    }
}

/// The OpenTelemetry instrument a family is exported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtelInstrument {
    /// Asynchronous gauge (f64).
    Gauge,
    /// Asynchronous monotonic counter (f64 sum).
    Counter,
    /// Asynchronous up-down counter (i64 non-monotonic sum), as the hardware conventions
    /// define memory sizes.
    UpDownCounter,
}

impl OtelInstrument {
    /// The word used in `docs/otlp.md`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            OtelInstrument::Gauge => "gauge",
            OtelInstrument::Counter => "counter",
            OtelInstrument::UpDownCounter => "updowncounter",
        }
    }
}

/// The OTLP name, unit and instrument of one family.
///
/// Names follow the OpenTelemetry hardware GPU semantic conventions (`hw.gpu.*`,
/// `hw.power`, `hw.energy`) where they define the metric, and `truthscale.*` otherwise.
/// Units are UCUM (`1`, `s`, `By`, `W`, `J`, `Hz`, `Cel`, `{error}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtelDesc {
    /// Metric name.
    pub name: &'static str,
    /// UCUM unit.
    pub unit: &'static str,
    /// Instrument.
    pub instrument: OtelInstrument,
    /// Attributes with a fixed value on every data point (e.g. `hw.gpu.task="general"`).
    pub fixed: &'static [(&'static str, &'static str)],
}

const fn gauge(name: &'static str, unit: &'static str) -> Option<OtelDesc> {
    Some(OtelDesc {
        name,
        unit,
        instrument: OtelInstrument::Gauge,
        fixed: &[],
    })
}

const fn counter(name: &'static str, unit: &'static str) -> Option<OtelDesc> {
    Some(OtelDesc {
        name,
        unit,
        instrument: OtelInstrument::Counter,
        fixed: &[],
    })
}

const fn updown(name: &'static str, unit: &'static str) -> Option<OtelDesc> {
    Some(OtelDesc {
        name,
        unit,
        instrument: OtelInstrument::UpDownCounter,
        fixed: &[],
    })
}

/// The [`MetricId`] of `Group::Variant` in the table.
macro_rules! metric_id {
    (Gpu $v:ident) => {
        MetricId::Gpu(GpuMetric::$v)
    };
    (Serving $v:ident) => {
        MetricId::Serving(ServingMetric::$v)
    };
    (Exporter $v:ident) => {
        MetricId::Exporter(ExporterMetric::$v)
    };
}

/// The label set of a group's families.
macro_rules! group_scope {
    (Gpu) => {
        Scope::Gpu
    };
    (Serving) => {
        Scope::Gpu
    };
    (Exporter) => {
        Scope::Exporter
    };
}

/// One enum per group, from the table's `Group::Variant` ids in table order: a muncher that
/// sorts the ids into the three groups, then writes the enums. (One recursion per family:
/// past about 120 families, raise `recursion_limit`.)
macro_rules! group_enums {
    (@sort [$(($g:ident $gn:literal))*] [$(($s:ident $sn:literal))*] [$(($e:ident $en:literal))*]) => {
        /// The families of one GPU entity (or of its processes and pods), but the serving
        /// engine's: what `gpu_values` writes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum GpuMetric {
            $(
                #[doc = $gn]
                $g
            ),*
        }

        /// The serving engine's families (per GPU entity, from the engine attached to it).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ServingMetric {
            $(
                #[doc = $sn]
                $s
            ),*
        }

        /// The families about the exporter itself.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ExporterMetric {
            $(
                #[doc = $en]
                $e
            ),*
        }

        impl GpuMetric {
            /// Every id of the group, in exposition order.
            pub const ALL: &[GpuMetric] = &[$(GpuMetric::$g),*];
        }

        impl ServingMetric {
            /// Every id of the group, in exposition order.
            pub const ALL: &[ServingMetric] = &[$(ServingMetric::$s),*];
        }

        impl ExporterMetric {
            /// Every id of the group, in exposition order.
            pub const ALL: &[ExporterMetric] = &[$(ExporterMetric::$e),*];
        }
    };
    (@sort [$($g:tt)*] [$($s:tt)*] [$($e:tt)*] Gpu $v:ident $n:literal $($rest:tt)*) => {
        group_enums!(@sort [$($g)* ($v $n)] [$($s)*] [$($e)*] $($rest)*);
    };
    (@sort [$($g:tt)*] [$($s:tt)*] [$($e:tt)*] Serving $v:ident $n:literal $($rest:tt)*) => {
        group_enums!(@sort [$($g)*] [$($s)* ($v $n)] [$($e)*] $($rest)*);
    };
    (@sort [$($g:tt)*] [$($s:tt)*] [$($e:tt)*] Exporter $v:ident $n:literal $($rest:tt)*) => {
        group_enums!(@sort [$($g)*] [$($s)*] [$($e)* ($v $n)] $($rest)*);
    };
}

macro_rules! metrics {
    ($( $id:ident / $group:ident :: $variant:ident = $name:literal, $kind:ident, [$($l:literal),*], $otel:expr, $raw:expr, $help:literal; )+) => {
        $(
            #[doc = $help]
            pub const $id: MetricDesc = MetricDesc {
                id: metric_id!($group $variant),
                name: $name,
                kind: Kind::$kind,
                help: $help,
                scope: group_scope!($group),
                extra_labels: &[$($l),*],
                otel: $otel,
                raw: $raw,
            };
        )+
        /// Every metric, in exposition order.
        pub const ALL: &[MetricDesc] = &[$($id),+];

        group_enums!(@sort [] [] [] $($group $variant $name)+);

        /// The position of each family in [`ALL`] (variant names are unique across groups,
        /// which this enum also checks).
        #[allow(clippy::enum_variant_names, reason = "the variants are named as the metrics are (GpuInfo, GpuUp, …)")]
        #[derive(Clone, Copy)]
        enum Position {
            $($variant),+
        }

        impl MetricId {
            /// The position of this id in [`ALL`] (exposition order): `0..ALL.len()`, for
            /// tables indexed by family.
            #[must_use]
            pub const fn index(self) -> usize {
                match self { $(metric_id!($group $variant) => Position::$variant as usize),+ }
            }

            /// The id of a full metric name (`truthscale_…`, counters with `_total`): the
            /// reverse map for readers of truthscale's own series.
            #[must_use]
            pub fn from_name(name: &str) -> Option<MetricId> {
                match name { $($name => Some(metric_id!($group $variant)),)+ _ => None }
            }
        }
    };
}

/// One id per catalog entry, by group: each group's value function matches its own enum
/// exhaustively, so a metric without a value, or a value without a metric, does not compile.
///
/// Ordered as [`ALL`] is (exposition order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricId {
    /// A family of a GPU entity.
    Gpu(GpuMetric),
    /// A family of the serving engine attached to a GPU entity.
    Serving(ServingMetric),
    /// A family about the exporter itself.
    Exporter(ExporterMetric),
}

impl MetricId {
    /// The catalog entry of this id.
    #[must_use]
    pub fn desc(self) -> &'static MetricDesc {
        &ALL[self.index()]
    }

    /// Whether the family is a counter the device keeps from before truthscale first read
    /// it (ECC counts since the driver loaded or over the device's life; the clock-violation
    /// and clock-event times): its first reading holds history, no increase truthscale saw.
    /// truthscale's own counters start at 0 with the first window.
    #[must_use]
    pub fn counted_by_device(self) -> bool {
        matches!(
            self,
            MetricId::Gpu(
                GpuMetric::GpuEccErrors
                    | GpuMetric::GpuEccAggregateErrors
                    | GpuMetric::GpuClockViolationSeconds
                    | GpuMetric::GpuClockEventSeconds
            )
        )
    }
}

impl PartialOrd for MetricId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MetricId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.index().cmp(&other.index())
    }
}

impl From<GpuMetric> for MetricId {
    fn from(m: GpuMetric) -> Self {
        MetricId::Gpu(m)
    }
}

impl From<ServingMetric> for MetricId {
    fn from(m: ServingMetric) -> Self {
        MetricId::Serving(m)
    }
}

impl From<ExporterMetric> for MetricId {
    fn from(m: ExporterMetric) -> Self {
        MetricId::Exporter(m)
    }
}

metrics! {
    GPU_INFO / Gpu::GpuInfo = "truthscale_gpu_info", Gauge, ["source", "fidelity", "catalog_model", "pci_bus_id", "driver_version"], gauge("truthscale.gpu.info", "1"), None,
        "Identity of a GPU or MIG instance (value 1); source=\"sim\" marks simulated data, replayed or live; fidelity is the capability tier, the best any window had (stable; per-window coverage is in the *_observed_seconds_total counters); pci_bus_id and driver_version as the source tells them, empty when it does not (joins with dcgm-exporter's series: docs/metrics.md).";
    GPU_UP / Gpu::GpuUp = "truthscale_gpu_up", Gauge, [], gauge("truthscale.gpu.up", "1"), None,
        "Whether the GPU produced data within the stale period (1), or stopped, e.g. fell off the bus (0, kept for 10 minutes; its other series are gone).";
    GPU_REPORTED_UTILIZATION / Gpu::GpuReportedUtilization = "truthscale_gpu_reported_utilization_ratio", Gauge, [], Some(OtelDesc { name: sm::HW_GPU_UTILIZATION, unit: "1", instrument: OtelInstrument::Gauge, fixed: &[(sa::HW_GPU_TASK, "general")] }), raw(Field::ReportedUtil, 1.0),
        "Busy fraction as nvidia-smi reports it: time with at least one kernel resident.";
    GPU_EFFECTIVE_COMPUTE / Gpu::GpuEffectiveCompute = "truthscale_gpu_effective_compute_ratio", Gauge, [], gauge("truthscale.gpu.effective_compute", "1"), None,
        "Effective compute fraction of the last window: tensor work (plus peak-weighted FP16/FP32 pipes) over the datasheet dense peak, times the clock correction; only for a window with an SM-clock reading and a catalog model (truthscale_gpu_clock_correction_ratio present): without them the tensor activity is not corrected, so there is no value (the raw pipe is truthscale_gpu_tensor_active_ratio).";
    GPU_EFFECTIVE_COMPUTE_UPPER_BOUND / Gpu::GpuEffectiveComputeUpperBound = "truthscale_gpu_effective_compute_upper_bound_ratio", Gauge, [], gauge("truthscale.gpu.effective_compute.upper_bound", "1"), None,
        "Upper bound on effective compute where it is not measured: without a tensor counter, the busy fraction times the model's maximum clock over its reference clock (kernels may run above the window's mean clock); with one but no SM-clock reading, the compute term times the model's maximum over reference clock (times 1.1 for a model not in the catalog).";
    GPU_ROOFLINE_SATURATION / Gpu::GpuRooflineSaturation = "truthscale_gpu_roofline_saturation_ratio", Gauge, [], gauge("truthscale.gpu.roofline_saturation", "1"), None,
        "Roofline saturation at the clocks the GPU ran: max(compute, DRAM activity).";
    GPU_INFLATION_GAP / Gpu::GpuInflationGap = "truthscale_gpu_inflation_gap_ratio", Gauge, [], gauge("truthscale.gpu.inflation_gap", "1"), None,
        "Reported utilization minus effective compute (multiply by 100 for points), 0 where effective compute reads above it (counted: truthscale_derivation_diagnostics_total{kind=\"negative_gap\"}); only where reported utilization is at least derive.inflation_min_util (0.05).";
    GPU_INFLATION_GAP_LOWER_BOUND / Gpu::GpuInflationGapLowerBound = "truthscale_gpu_inflation_gap_lower_bound_ratio", Gauge, [], gauge("truthscale.gpu.inflation_gap.lower_bound", "1"), None,
        "Lower bound on the inflation gap where effective compute is not measured: reported utilization minus truthscale_gpu_effective_compute_upper_bound_ratio, 0 where the bound reads above it; only where reported utilization is at least derive.inflation_min_util (0.05). A tensor counter and an SM-clock reading with a catalog model make it exact (truthscale_gpu_inflation_gap_ratio).";
    GPU_SPATIAL_INFLATION / Gpu::GpuSpatialInflation = "truthscale_gpu_spatial_inflation_factor", Gauge, [], gauge("truthscale.gpu.spatial_inflation", "1"), None,
        "Reported utilization over SM active: how much the busy flag overstates SM coverage.";
    GPU_INTENSITY_RIDGE / Gpu::GpuIntensityRidge = "truthscale_gpu_intensity_ridge_ratio", Gauge, [], gauge("truthscale.gpu.intensity_ridge", "1"), None,
        "Operational intensity over the roofline ridge (rho = the compute term, tensor plus peak-weighted FP16 and FP32 activity, over DRAM activity of at least 0.02); above 1 is compute-bound; absent where both are below 0.02.";
    GPU_POWER_PROXY / Gpu::GpuPowerProxy = "truthscale_gpu_power_proxy_ratio", Gauge, [], gauge("truthscale.gpu.power_proxy", "1"), None,
        "Power above idle over the power range: an estimate of work intensity, not compute (below the profiling tier).";
    GPU_CLOCK_CORRECTION / Gpu::GpuClockCorrection = "truthscale_gpu_clock_correction_ratio", Gauge, [], gauge("truthscale.gpu.clock_correction", "1"), None,
        "Mean SM clock of the last window over the clock the datasheet peak assumes (kappa).";
    GPU_SM_ACTIVE / Gpu::GpuSmActive = "truthscale_gpu_sm_active_ratio", Gauge, [], gauge("truthscale.gpu.sm.active", "1"), raw(Field::SmActive, 1.0),
        "Raw SM active fraction, where the source provides it.";
    GPU_SM_OCCUPANCY / Gpu::GpuSmOccupancy = "truthscale_gpu_sm_occupancy_ratio", Gauge, [], gauge("truthscale.gpu.sm.occupancy", "1"), raw(Field::SmOccupancy, 1.0),
        "Raw SM occupancy, where the source provides it.";
    GPU_TENSOR_ACTIVE / Gpu::GpuTensorActive = "truthscale_gpu_tensor_active_ratio", Gauge, [], gauge("truthscale.gpu.tensor.active", "1"), raw(Field::TensorActive, 1.0),
        "Raw tensor pipe active fraction, where the source provides it.";
    GPU_HMMA_ACTIVE / Gpu::GpuHmmaActive = "truthscale_gpu_hmma_active_ratio", Gauge, [], gauge("truthscale.gpu.tensor.hmma.active", "1"), raw(Field::HmmaActive, 1.0),
        "Raw HMMA (half-precision) tensor pipe active fraction, where the source provides it.";
    GPU_IMMA_ACTIVE / Gpu::GpuImmaActive = "truthscale_gpu_imma_active_ratio", Gauge, [], gauge("truthscale.gpu.tensor.imma.active", "1"), raw(Field::ImmaActive, 1.0),
        "Raw IMMA (integer) tensor pipe active fraction, where the source provides it.";
    GPU_DRAM_ACTIVE / Gpu::GpuDramActive = "truthscale_gpu_dram_active_ratio", Gauge, [], gauge("truthscale.gpu.dram.active", "1"), raw(Field::DramActive, 1.0),
        "Raw DRAM bandwidth fraction, where the source provides it.";
    GPU_OBSERVED_SECONDS / Gpu::GpuObservedSeconds = "truthscale_gpu_observed_seconds_total", Counter, [], counter("truthscale.gpu.observed.time", "s"), None,
        "Seconds covered by derived windows (the denominator for exact averages).";
    GPU_UNOBSERVED_SECONDS / Gpu::GpuUnobservedSeconds = "truthscale_gpu_unobserved_seconds_total", Counter, [], counter("truthscale.gpu.unobserved.time", "s"), None,
        "Seconds not observed: windows longer than derive.max_gap_intervals of the source's update interval (a source that was down, a capture with a hole). No other counter grows for them, but energy where the energy counter spans them.";
    GPU_BUSY_SECONDS / Gpu::GpuBusySeconds = "truthscale_gpu_busy_seconds_total", Counter, [], counter("truthscale.gpu.busy.time", "s"), None,
        "Integral of reported utilization over the seconds it was measured; only for entities with a busy flag. Mean: divide by truthscale_gpu_busy_observed_seconds_total.";
    GPU_BUSY_OBSERVED_SECONDS / Gpu::GpuBusyObservedSeconds = "truthscale_gpu_busy_observed_seconds_total", Counter, [], counter("truthscale.gpu.busy.observed.time", "s"), None,
        "Seconds in which the busy flag was measured: the denominator of truthscale_gpu_busy_seconds_total.";
    GPU_EFFECTIVE_COMPUTE_SECONDS / Gpu::GpuEffectiveComputeSeconds = "truthscale_gpu_effective_compute_seconds_total", Counter, [], counter("truthscale.gpu.effective_compute.time", "s"), None,
        "Integral of the effective compute fraction over the seconds it was measured; only for entities where it was (a tensor counter, an SM-clock reading and a catalog model). Mean: divide by truthscale_gpu_effective_compute_observed_seconds_total.";
    GPU_EFFECTIVE_COMPUTE_OBSERVED_SECONDS / Gpu::GpuEffectiveComputeObservedSeconds = "truthscale_gpu_effective_compute_observed_seconds_total", Counter, [], counter("truthscale.gpu.effective_compute.observed.time", "s"), None,
        "Seconds in which effective compute was measured (DCGM multiplexing blanks some windows): the denominator of truthscale_gpu_effective_compute_seconds_total.";
    GPU_REGIME_SECONDS / Gpu::GpuRegimeSeconds = "truthscale_gpu_regime_seconds_total", Counter, ["regime", "method"], counter("truthscale.gpu.regime.time", "s"), None,
        "Seconds in each counter regime (idle, compute_bound, memory_bound, mixed, stalled, underloaded, comm_bound), for every workload; method=counters from tensor and DRAM counters, method=power_heuristic an estimate from the busy flag and power.";
    GPU_REGIME / Gpu::GpuRegime = "truthscale_gpu_regime", Gauge, ["regime", "method"], gauge("truthscale.gpu.regime", "1"), None,
        "The counter regime of the last window (1) and the others (0); method says how it was decided.";
    GPU_PHASE_SECONDS / Gpu::GpuPhaseSeconds = "truthscale_gpu_phase_seconds_total", Counter, ["phase", "method"], counter("truthscale.gpu.phase.time", "s"), None,
        "LLM serving only (an engine attached, or derive.workload = llm_serving): seconds in each phase; prefill is the compute-bound regime, decode the memory-bound one.";
    GPU_PHASE / Gpu::GpuPhase = "truthscale_gpu_phase", Gauge, ["phase", "method"], gauge("truthscale.gpu.phase", "1"), None,
        "LLM serving only: the current phase (1) and the others (0), in serving words (prefill, decode).";
    GPU_MEMORY_USED / Gpu::GpuMemoryUsed = "truthscale_gpu_memory_used_bytes", Gauge, [], updown(sm::HW_GPU_MEMORY_USAGE, "By"), raw(Field::MemUsedBytes, 1.0),
        "Allocated device memory.";
    GPU_MEMORY_TOTAL / Gpu::GpuMemoryTotal = "truthscale_gpu_memory_total_bytes", Gauge, [], updown(sm::HW_GPU_MEMORY_LIMIT, "By"), raw(Field::MemTotalBytes, 1.0),
        "Total device memory.";
    GPU_MEMORY_UTILIZATION / Gpu::GpuMemoryUtilization = "truthscale_gpu_memory_utilization_ratio", Gauge, [], gauge(sm::HW_GPU_MEMORY_UTILIZATION, "1"), None,
        "Allocated device memory over total device memory (truthscale_gpu_memory_used_bytes / truthscale_gpu_memory_total_bytes), where both were read: what the memory holds, not how busy its bus is (that is truthscale_gpu_dram_active_ratio).";
    GPU_POWER / Gpu::GpuPower = "truthscale_gpu_power_watts", Gauge, [], gauge(sm::HW_POWER, "W"), estimate(Field::PowerWatts, 1.0),
        "Power over the last window (from the energy counter when available).";
    GPU_POWER_LIMIT / Gpu::GpuPowerLimit = "truthscale_gpu_power_limit_watts", Gauge, [], gauge("truthscale.gpu.power.limit", "W"), raw(Field::PowerLimitWatts, 1.0),
        "Enforced power limit.";
    GPU_ENERGY / Gpu::GpuEnergy = "truthscale_gpu_energy_joules_total", Counter, [], counter(sm::HW_ENERGY, "J"), None,
        "Energy measured since the exporter first saw the GPU (energy counter deltas, else power times time); only for entities with an energy or power reading. A counter delta is counted when the counter next moves, with its seconds, so both this and truthscale_gpu_energy_observed_seconds_total may hold for up to 5 minutes while power is drawn: mean power is the increase of this over the increase of that, never its rate alone.";
    GPU_ENERGY_OBSERVED_SECONDS / Gpu::GpuEnergyObservedSeconds = "truthscale_gpu_energy_observed_seconds_total", Counter, [], counter("truthscale.gpu.energy.observed.time", "s"), None,
        "Seconds in which energy was measured: the denominator for mean power from truthscale_gpu_energy_joules_total.";
    GPU_ENERGY_PART / Gpu::GpuEnergyPart = "truthscale_gpu_energy_part_joules_total", Counter, ["part"], counter("truthscale.gpu.energy.part", "J"), None,
        "truthscale_gpu_energy_joules_total in parts that sum to it: part=\"idle_floor\", the idle floor (truthscale_gpu_idle_floor_watts) times the seconds, at most the energy; part=\"active\", the rest (never below 0); part=\"unsplit\", only where there was any, the energy counted while no floor was known (a model the catalog lacks, before its first window at busy 0), neither idle nor active. Only for entities with an idle floor.";
    GPU_IDLE_FLOOR / Gpu::GpuIdleFloor = "truthscale_gpu_idle_floor_watts", Gauge, ["floor"], gauge("truthscale.gpu.idle_floor", "W"), None,
        "The power this GPU draws at busy 0, the floor its energy is split at: floor=\"measured\", the lowest power of its own windows whose busy flag read 0; floor=\"catalog\", the model's idle power until such a window.";
    GPU_UNALLOCATED_ENERGY / Gpu::GpuUnallocatedEnergy = "truthscale_gpu_unallocated_energy_joules_total", Counter, ["part"], counter("truthscale.gpu.energy.unallocated", "J"), None,
        "Node mode: the energy of the windows no pod held this GPU or MIG instance (part=\"idle_floor\", part=\"active\" and, only where there was any, part=\"unsplit\", as truthscale_gpu_energy_part_joules_total): showback's unallocated row.";
    GPU_SM_CLOCK / Gpu::GpuSmClock = "truthscale_gpu_sm_clock_hertz", Gauge, [], gauge("truthscale.gpu.sm.clock", "Hz"), raw(Field::SmClockMhz, 1e6),
        "SM clock.";
    GPU_TEMPERATURE / Gpu::GpuTemperature = "truthscale_gpu_temperature_celsius", Gauge, [], gauge("truthscale.gpu.temperature", "Cel"), raw(Field::TempCelsius, 1.0),
        "GPU temperature.";
    GPU_CLOCK_EVENT / Gpu::GpuClockEvent = "truthscale_gpu_clock_event_active", Gauge, ["reason"], gauge("truthscale.gpu.clock_event.active", "1"), None,
        "Clock-event (throttle) reasons active in the last window (1) or not (0).";
    GPU_IDLE_SECONDS / Gpu::GpuIdleSeconds = "truthscale_gpu_idle_seconds", Gauge, [], gauge("truthscale.gpu.idle.time", "s"), None,
        "Seconds since this GPU or MIG instance (and, in node mode, its holder: a new holder starts at 0) last did work: the busy flag at verdict.idle_util or more, effective compute at 0.01 or more, or tokens from its serving engine (a decode server with steady tokens is never idle). 0 in a window with work; since truthscale first saw it when it never worked. Only idle time observed counts: after a gap in the readings, or a window that measured none of them, it starts again at 0. Absent where the window measured none of them.";
    GPU_VERDICT / Gpu::GpuVerdict = "truthscale_gpu_verdict", Gauge, ["verdict"], gauge("truthscale.gpu.verdict", "1"), None,
        "The verdict of the last window (1) and the others (0): throttled, blocked, starved, busy, idle, unknown, unavailable (see docs/verdicts.md).";
    GPU_STARVED_SECONDS / Gpu::GpuStarvedSeconds = "truthscale_gpu_starved_seconds_total", Counter, ["cause"], counter("truthscale.gpu.starved.time", "s"), None,
        "Seconds judged starved (busy flag high, roofline saturation low), by the cause decided for each window, in rule order: cpu_throttled, cpu_contended, io_stalled, host_to_device, launch_bound, comm_bound, else unknown (docs/verdicts.md). Summed over cause: the starved seconds. Only for entities with a second that could be judged starved (truthscale_gpu_starved_judged_seconds_total): none other is written, never a 0 for one that could not be judged.";
    GPU_SATURATION_OBSERVED_SECONDS / Gpu::GpuSaturationObservedSeconds = "truthscale_gpu_saturation_observed_seconds_total", Counter, [], counter("truthscale.gpu.saturation.observed.time", "s"), None,
        "Seconds in which roofline saturation was measured (its compute term and DRAM activity both read; DCGM multiplexing blanks some windows): the denominator of its mean.";
    GPU_STARVED_JUDGED_SECONDS / Gpu::GpuStarvedJudgedSeconds = "truthscale_gpu_starved_judged_seconds_total", Counter, [], counter("truthscale.gpu.starved.judged.time", "s"), None,
        "Seconds that could be judged starved or not: roofline saturation measured, the busy flag read (or, where there is none, as on a MIG instance, the graphics engine's activity standing in for it, as for the verdict), and the GPU not judged unavailable; none where neither was read. The share of them starved: sum without (cause) (increase(truthscale_gpu_starved_seconds_total)) / increase(this), never over wall time.";
    GPU_HEALTH / Gpu::GpuHealth = "truthscale_gpu_health", Gauge, ["state"], updown(sm::HW_STATUS, "1"), None,
        "The health of the last window (1) and the others (0): unavailable (a row remap pending or failed, unrepairable memory, a recovery action asked for, a fatal XID last or counted in dcgm-exporter's window, an unhealthy fabric, a double-bit ECC error), degraded (single-bit ECC errors rose in the window, the clocks were held down by power or temperature for verdict.health.degraded_violation_share of it or more, or the fabric has limited capacity), else ok; absent where none of the health fields was read (see docs/verdicts.md).";
    GPU_UNAVAILABLE_SECONDS / Gpu::GpuUnavailableSeconds = "truthscale_gpu_unavailable_seconds_total", Counter, [], counter("truthscale.gpu.unavailable.time", "s"), None,
        "Seconds judged unavailable (verdict unavailable): GPU time that could take no work, counted apart from idle and busy. Only for entities whose health was read (no other second can be judged unavailable).";
    GPU_XID_LAST / Gpu::GpuXidLast = "truthscale_gpu_xid_last", Gauge, [], gauge("truthscale.gpu.xid.last", "{xid}"), raw(Field::XidLast, 1.0),
        "The last XID error the driver reported (DCGM 230, NVML's critical-XID events), 0 for none; 48, 79, 94, 95, 119 and 120 make the GPU unavailable.";
    GPU_XID_WINDOW_ERRORS / Gpu::GpuXidWindowErrors = "truthscale_gpu_xid_window_errors", Gauge, [], gauge("truthscale.gpu.xid.window_errors", "{error}"), raw(Field::XidWindowErrors, 1.0),
        "XID errors counted in the source's window: dcgm-exporter's own (DCGM_EXP_XID_ERRORS_COUNT summed over xid; the window is its --xid-count-window-size, 5 minutes by default), or NVML's critical-XID events of the last 5 minutes (since they were registered, where less). Per XID, read dcgm-exporter's own series.";
    GPU_XID_WINDOW_FATAL / Gpu::GpuXidWindowFatal = "truthscale_gpu_xid_window_fatal", Gauge, [], gauge("truthscale.gpu.xid.window_fatal", "{xid}"), raw(Field::XidWindowFatal, 1.0),
        "A fatal XID (48, 79, 94, 95, 119, 120) counted in the source's window (dcgm-exporter's, or NVML's last 5 minutes), the one counted most (the lowest on a tie), 0 for none: not 0 makes the GPU unavailable.";
    GPU_ECC_ERRORS / Gpu::GpuEccErrors = "truthscale_gpu_ecc_errors_total", Counter, ["kind", "scope"], counter(sm::HW_ERRORS, "{error}"), None,
        "ECC errors since the driver loaded, as the device counts them: kind=sbe (single-bit, corrected) or dbe (double-bit, uncorrected); scope=volatile (DCGM 310/311, NVML's volatile counts). Resets with the driver. The count over the device's life is truthscale_gpu_ecc_aggregate_errors_total, which holds these: never sum the two.";
    GPU_ECC_AGGREGATE_ERRORS / Gpu::GpuEccAggregateErrors = "truthscale_gpu_ecc_aggregate_errors_total", Counter, ["kind"], counter("truthscale.gpu.ecc.aggregate.errors", "{error}"), None,
        "Double-bit ECC errors over the device's life (kind=dbe; DCGM 313, NVML's aggregate count). They include those truthscale_gpu_ecc_errors_total{kind=\"dbe\"} counts since the driver loaded: never sum the two.";
    GPU_ROW_REMAP_PENDING / Gpu::GpuRowRemapPending = "truthscale_gpu_row_remap_pending", Gauge, [], gauge("truthscale.gpu.row_remap.pending", "1"), raw(Field::RowRemapPending, 1.0),
        "1 while a row remap waits for a GPU reset (DCGM 396, NVML remapped rows), else 0: the GPU is unavailable.";
    GPU_ROW_REMAP_FAILED / Gpu::GpuRowRemapFailed = "truthscale_gpu_row_remap_failed", Gauge, [], gauge("truthscale.gpu.row_remap.failed", "1"), raw(Field::RowRemapFailed, 1.0),
        "1 when a row remap failed (DCGM 395, NVML remapped rows), else 0: the GPU is unavailable.";
    GPU_ROW_REMAP_UNCORRECTABLE / Gpu::GpuRowRemapUncorrectable = "truthscale_gpu_row_remap_uncorrectable_rows", Gauge, [], gauge("truthscale.gpu.row_remap.uncorrectable", "{row}"), raw(Field::RowRemapUncorrectable, 1.0),
        "Rows remapped for uncorrectable memory errors (DCGM 393, NVML remapped rows).";
    GPU_RECOVERY_ACTION / Gpu::GpuRecoveryAction = "truthscale_gpu_recovery_action", Gauge, [], gauge("truthscale.gpu.recovery_action", "{action}"), raw(Field::RecoveryAction, 1.0),
        "The recovery the driver asks for (DCGM 1523, NVML field value): 0 none, 1 GPU reset, 2 node reboot, 3 drain peer-to-peer, 4 drain and reset; not 0 makes the GPU unavailable.";
    GPU_MEMORY_UNREPAIRABLE / Gpu::GpuMemoryUnrepairable = "truthscale_gpu_memory_unrepairable", Gauge, [], gauge("truthscale.gpu.memory.unrepairable", "1"), raw(Field::MemoryUnrepairable, 1.0),
        "1 when the driver flags the GPU's memory unrepairable (DCGM 1507), else 0: the GPU is unavailable.";
    GPU_FABRIC_HEALTH_SUMMARY / Gpu::GpuFabricHealthSummary = "truthscale_gpu_fabric_health", Gauge, [], gauge("truthscale.gpu.fabric.health", "{state}"), raw(Field::FabricHealthSummary, 1.0),
        "The GPU fabric's health summary (DCGM 175): 0 not supported, 1 healthy, 2 unhealthy (the GPU is unavailable), 3 limited capacity (degraded).";
    GPU_CLOCK_VIOLATION_SECONDS / Gpu::GpuClockViolationSeconds = "truthscale_gpu_clock_violation_seconds_total", Counter, ["reason"], counter("truthscale.gpu.clock_violation.time", "s"), None,
        "Time the clocks were held down, as the device counts it since the driver loaded: reason=power (DCGM 240) or thermal (DCGM 241, NVML violation status). A rise of verdict.health.degraded_violation_share of a window or more makes the GPU degraded.";
    GPU_CLOCK_EVENT_SECONDS / Gpu::GpuClockEventSeconds = "truthscale_gpu_clock_event_seconds_total", Counter, ["reason"], counter("truthscale.gpu.clock_event.time", "s"), None,
        "Time the clocks were slowed, by clock-event reason, as the device counts it since the driver loaded (DCGM 1420-1424, NVML field values): reason=sw_power_cap, sync_boost, sw_thermal, hw_thermal, hw_power_brake. Reasons overlap (and overlap truthscale_gpu_clock_violation_seconds_total): do not sum them. Where the violation times are not read, the power and thermal reasons (not sync_boost) decide degraded.";
    GPU_PCIE_RECEIVE / Gpu::GpuPcieReceive = "truthscale_gpu_pcie_receive_bytes_per_second", Gauge, [], gauge("truthscale.gpu.pcie.receive.rate", "By/s"), raw(Field::PcieRxBytesPerSec, 1.0),
        "PCIe receive (host to device) over the last window, as the source measures it (DCGM 1010, NVML GPM; without GPM, NVML's 20 ms sample at the window's end).";
    GPU_PCIE_TRANSMIT / Gpu::GpuPcieTransmit = "truthscale_gpu_pcie_transmit_bytes_per_second", Gauge, [], gauge("truthscale.gpu.pcie.transmit.rate", "By/s"), raw(Field::PcieTxBytesPerSec, 1.0),
        "PCIe transmit (device to host) over the last window.";
    GPU_PCIE_LINK_GENERATION / Gpu::GpuPcieLinkGeneration = "truthscale_gpu_pcie_link_generation", Gauge, [], gauge("truthscale.gpu.pcie.link.generation", "{generation}"), raw(Field::PcieLinkGen, 1.0),
        "The PCIe link's current generation (DCGM 237, NVML): with its width, the link's capacity.";
    GPU_PCIE_LINK_WIDTH / Gpu::GpuPcieLinkWidth = "truthscale_gpu_pcie_link_width", Gauge, [], gauge("truthscale.gpu.pcie.link.width", "{lane}"), raw(Field::PcieLinkWidth, 1.0),
        "The PCIe link's current width in lanes (DCGM 238, NVML).";
    GPU_NVLINK_RECEIVE / Gpu::GpuNvlinkReceive = "truthscale_gpu_nvlink_receive_bytes_per_second", Gauge, [], gauge("truthscale.gpu.nvlink.receive.rate", "By/s"), raw(Field::NvlinkRxBytesPerSec, 1.0),
        "NVLink receive over the last window, all links (DCGM 1012, NVML GPM).";
    GPU_NVLINK_TRANSMIT / Gpu::GpuNvlinkTransmit = "truthscale_gpu_nvlink_transmit_bytes_per_second", Gauge, [], gauge("truthscale.gpu.nvlink.transmit.rate", "By/s"), raw(Field::NvlinkTxBytesPerSec, 1.0),
        "NVLink transmit over the last window, all links (DCGM 1011, NVML GPM).";
    GPU_NVLINK_TRANSMIT_WAIT / Gpu::GpuNvlinkTransmitWait = "truthscale_gpu_nvlink_transmit_wait_per_second", Gauge, [], gauge("truthscale.gpu.nvlink.transmit_wait.rate", "{tick}/s"), raw(Field::NvlinkTxWaitPerSec, 1.0),
        "NVLink port transmit wait over the last window, summed over the GPU's links (DCGM 1509, per link; the rise of the cumulative counter per second): ticks in which a port had data to send and could not. Rising while the tensor pipes idle, the GPU waits on its links (comm_bound). From dcgm-exporter, which holds the counter between its collections, a repeat holds the last rise's rate for up to 60 s. Blank for a first reading, a counter that went back, or any link blank.";
    GPU_PCIE_RECEIVE_SATURATION / Gpu::GpuPcieReceiveSaturation = "truthscale_gpu_pcie_receive_saturation_ratio", Gauge, [], gauge("truthscale.gpu.pcie.receive.saturation", "1"), None,
        "PCIe receive over the link's capacity per direction at its current generation and width (read from the device): near 1, host-to-device copies fill the link. Written only where the link was read; else truthscale_gpu_pcie_receive_saturation_lower_bound_ratio.";
    GPU_PCIE_RECEIVE_SATURATION_LOWER_BOUND / Gpu::GpuPcieReceiveSaturationLowerBound = "truthscale_gpu_pcie_receive_saturation_lower_bound_ratio", Gauge, [], gauge("truthscale.gpu.pcie.receive.saturation.lower_bound", "1"), None,
        "A LOWER BOUND, not a measurement: PCIe receive over the model's maximum link (the catalog's generation, x16), where the link's current generation and width were not read. A link trained lower makes the true share larger; reading DCGM 237/238 or NVML's link makes it exact.";
    GPU_NVLINK_SATURATION / Gpu::GpuNvlinkSaturation = "truthscale_gpu_nvlink_saturation_ratio", Gauge, [], gauge("truthscale.gpu.nvlink.saturation", "1"), None,
        "NVLink traffic, both directions, over the model's bidirectional NVLink peak (the catalog, beside the FLOP peaks; 900 GB/s on H100 and H200 SXM). Absent for a model without NVLink or where a direction was not read.";
    GPU_STRAGGLER_GAP / Gpu::GpuStragglerGap = "truthscale_gpu_straggler_gap_ratio", Gauge, ["job_group", "signal"], gauge("truthscale.gpu.straggler.gap", "1"), None,
        "A sustained straggler of its job (job_group: the pod, the job label's value, or node; see docs/verdicts.md): how far its signal (sm_clock, effective_compute) sits below the job's median, as a share of the median. Written only for the straggler, only while it is one.";
    GPU_WAITING_ON_STRAGGLER / Gpu::GpuWaitingOnStraggler = "truthscale_gpu_waiting_on_straggler_gap_ratio", Gauge, ["job_group"], gauge("truthscale.gpu.waiting_on_straggler.gap", "1"), None,
        "A GPU whose job has a sustained straggler (not this GPU): that straggler's largest gap. The GPU then waits on it: regime comm_bound, and its starved seconds go to cause comm_bound.";
    GPU_HOLDER_CPU_THROTTLED / Gpu::GpuHolderCpuThrottled = "truthscale_gpu_holder_cpu_throttled_ratio", Gauge, [], gauge("truthscale.gpu.holder.cpu.throttled", "1"), raw(Field::HolderCpuThrottledRatio, 1.0),
        "Node mode: of the CFS periods of the pods holding the GPU over the last window, the share throttled (cgroup v2 cpu.stat nr_throttled/nr_periods; the worst holder).";
    GPU_HOLDER_CPU_LIMIT / Gpu::GpuHolderCpuLimit = "truthscale_gpu_holder_cpu_limit_cores", Gauge, [], gauge("truthscale.gpu.holder.cpu.limit", "{cpu}"), raw(Field::HolderCpuLimitCores, 1.0),
        "Node mode: the CPU limit of the most throttled holder pod, in CPUs (cgroup v2 cpu.max); absent where no limit is set.";
    GPU_HOLDER_CPU_WAITING / Gpu::GpuHolderCpuWaiting = "truthscale_gpu_holder_cpu_pressure_waiting_ratio", Gauge, [], gauge("truthscale.gpu.holder.cpu.pressure.waiting", "1"), raw(Field::HolderCpuWaitingRatio, 1.0),
        "Node mode: the share of the last window in which some task of a holder pod waited for a CPU (cpu.pressure some; the worst holder).";
    GPU_HOLDER_IO_WAITING / Gpu::GpuHolderIoWaiting = "truthscale_gpu_holder_io_pressure_waiting_ratio", Gauge, [], gauge("truthscale.gpu.holder.io.pressure.waiting", "1"), raw(Field::HolderIoWaitingRatio, 1.0),
        "Node mode: the share of the last window in which some task of a holder pod waited on I/O (io.pressure some; the worst holder).";
    GPU_HOLDER_IO_STALLED / Gpu::GpuHolderIoStalled = "truthscale_gpu_holder_io_pressure_stalled_ratio", Gauge, [], gauge("truthscale.gpu.holder.io.pressure.stalled", "1"), raw(Field::HolderIoStalledRatio, 1.0),
        "Node mode: the share of the last window in which all tasks of a holder pod waited on I/O (io.pressure full; the worst holder).";
    GPU_HOLDER_MEMORY_STALLED / Gpu::GpuHolderMemoryStalled = "truthscale_gpu_holder_memory_pressure_stalled_ratio", Gauge, [], gauge("truthscale.gpu.holder.memory.pressure.stalled", "1"), raw(Field::HolderMemoryStalledRatio, 1.0),
        "Node mode: the share of the last window in which all tasks of a holder pod waited on memory (memory.pressure full; the worst holder).";
    POD_CPU_THROTTLED / Gpu::PodCpuThrottled = "truthscale_pod_cpu_throttled_ratio", Gauge, [], gauge("truthscale.pod.cpu.throttled", "1"), None,
        "Node mode: of the CFS periods of one pod holding the GPU over the last window, the share throttled (cgroup v2 cpu.stat nr_throttled/nr_periods), labelled with that pod and namespace (none where the GPU's series already name it); a pod whose processes are not attributed has none (it still counts in truthscale_gpu_holder_cpu_throttled_ratio).";
    POD_CPU_LIMIT / Gpu::PodCpuLimit = "truthscale_pod_cpu_limit_cores", Gauge, [], gauge("truthscale.pod.cpu.limit", "{cpu}"), None,
        "Node mode: the CPU limit of one pod holding the GPU, in CPUs (cgroup v2 cpu.max), labelled as truthscale_pod_cpu_throttled_ratio; absent where no limit is set.";
    POD_CPU_WAITING / Gpu::PodCpuWaiting = "truthscale_pod_cpu_pressure_waiting_ratio", Gauge, [], gauge("truthscale.pod.cpu.pressure.waiting", "1"), None,
        "Node mode: the share of the last window in which some task of one pod holding the GPU waited for a CPU (cpu.pressure some), labelled as truthscale_pod_cpu_throttled_ratio.";
    POD_IO_WAITING / Gpu::PodIoWaiting = "truthscale_pod_io_pressure_waiting_ratio", Gauge, [], gauge("truthscale.pod.io.pressure.waiting", "1"), None,
        "Node mode: the share of the last window in which some task of one pod holding the GPU waited on I/O (io.pressure some), labelled as truthscale_pod_cpu_throttled_ratio.";
    POD_IO_STALLED / Gpu::PodIoStalled = "truthscale_pod_io_pressure_stalled_ratio", Gauge, [], gauge("truthscale.pod.io.pressure.stalled", "1"), None,
        "Node mode: the share of the last window in which all tasks of one pod holding the GPU waited on I/O (io.pressure full), labelled as truthscale_pod_cpu_throttled_ratio.";
    POD_MEMORY_STALLED / Gpu::PodMemoryStalled = "truthscale_pod_memory_pressure_stalled_ratio", Gauge, [], gauge("truthscale.pod.memory.pressure.stalled", "1"), None,
        "Node mode: the share of the last window in which all tasks of one pod holding the GPU waited on memory (memory.pressure full), labelled as truthscale_pod_cpu_throttled_ratio.";
    GPU_CEILING_ROOFLINE_SATURATION / Gpu::GpuCeilingRooflineSaturation = "truthscale_gpu_ceiling_roofline_saturation_ratio", Gauge, [], gauge("truthscale.gpu.ceiling.roofline_saturation", "1"), None,
        "Observed ceiling: the best 60 s average roofline saturation seen in the last hour. Observed, so a lower bound on the true ceiling.";
    GPU_CEILING_OUTPUT_TOKENS / Gpu::GpuCeilingOutputTokens = "truthscale_gpu_ceiling_output_tokens_per_second", Gauge, [], gauge("truthscale.gpu.ceiling.output_tokens.rate", "{token}/s"), None,
        "Observed ceiling: the best 60 s average of the serving engine's output tokens per second in the last hour. Observed, so a lower bound on the true ceiling.";
    GPU_CEILING_AGE / Gpu::GpuCeilingAge = "truthscale_gpu_ceiling_age_seconds", Gauge, ["quantity"], gauge("truthscale.gpu.ceiling.age", "s"), None,
        "Seconds since the 60 s span that set the observed ceiling ended; quantity=roofline_saturation|output_tokens_per_second.";
    GPU_CEILING_RATIO / Gpu::GpuCeilingRatio = "truthscale_gpu_ceiling_ratio", Gauge, ["quantity"], gauge("truthscale.gpu.ceiling.ratio", "1"), None,
        "Current window over the observed ceiling (quantity=roofline_saturation|output_tokens_per_second). The ceiling is observed, a lower bound on the true one, so this overstates how close to the limit the GPU runs; one window can exceed 1.";
    SERVING_ENGINE_UP / Serving::ServingEngineUp = "truthscale_serving_engine_up", Gauge, ["engine", "absent_reason"], gauge("truthscale.serving.engine.up", "1"), None,
        "Whether the serving engine's /metrics was read with the GPU sample (1, engine=vllm|sglang|tgi, or sim for the simulator's) or is absent (0, with absent_reason, and engine where it was told); absent is never zeros.";
    SERVING_KV_CACHE_USAGE / Serving::ServingKvCacheUsage = "truthscale_serving_kv_cache_usage_ratio", Gauge, ["engine"], gauge("truthscale.serving.kv_cache.usage", "1"), None,
        "KV-cache pressure: fraction of the engine's KV-cache blocks in use.";
    SERVING_REQUESTS_RUNNING / Serving::ServingRequestsRunning = "truthscale_serving_requests_running", Gauge, ["engine"], gauge("truthscale.serving.requests.running", "{request}"), None,
        "Requests the engine is running.";
    SERVING_REQUESTS_WAITING / Serving::ServingRequestsWaiting = "truthscale_serving_requests_waiting", Gauge, ["engine"], gauge("truthscale.serving.requests.waiting", "{request}"), None,
        "Requests queued in the engine.";
    SERVING_QUEUE_SECONDS / Serving::ServingQueueSeconds = "truthscale_serving_queue_seconds", Gauge, ["engine"], gauge("truthscale.serving.queue.duration", "s"), None,
        "Mean time in the queue of the requests whose queue time the engine recorded in the last window (vLLM records it when a request finishes).";
    SERVING_PROMPT_TOKENS / Serving::ServingPromptTokens = "truthscale_serving_prompt_tokens_per_second", Gauge, ["engine"], gauge("truthscale.serving.prompt_tokens.rate", "{token}/s"), None,
        "Prompt (prefill) tokens per second: the rate of the engine's counter over the last window, resets handled.";
    SERVING_OUTPUT_TOKENS / Serving::ServingOutputTokens = "truthscale_serving_output_tokens_per_second", Gauge, ["engine"], gauge("truthscale.serving.output_tokens.rate", "{token}/s"), None,
        "Output (generated) tokens per second: the rate of the engine's counter over the last window, resets handled.";
    SERVING_BATCH_SIZE / Serving::ServingBatchSize = "truthscale_serving_batch_size", Gauge, ["engine"], gauge("truthscale.serving.batch.size", "{request}"), None,
        "Requests in the running batch.";
    SERVING_TOKENS_PER_EFFECTIVE_COMPUTE / Serving::ServingTokensPerEffectiveCompute = "truthscale_serving_tokens_per_effective_compute_second", Gauge, ["engine"], gauge("truthscale.serving.tokens_per_effective_compute", "{token}/s"), None,
        "This GPU's share of the engine's prompt plus output tokens per second (the engine's over the GPUs its pod holds) over its effective compute fraction: tokens per second of full-peak compute.";
    SERVING_ENERGY_PER_OUTPUT_TOKEN / Serving::ServingEnergyPerOutputToken = "truthscale_serving_energy_per_output_token_joules", Gauge, ["engine"], gauge("truthscale.serving.energy_per_output_token", "J/{token}"), None,
        "The GPU's energy per output token over the last window: its power over its share of the engine's output tokens per second (the engine's over the GPUs its pod holds); only when the engine produced tokens. The GPU's whole energy, idle floor included.";
    SERVING_MFU / Serving::ServingMfu = "truthscale_serving_model_flops_utilization_ratio", Gauge, ["engine", "assumptions"], gauge("truthscale.serving.mfu", "1"), None,
        "Model FLOP utilization 2*params*tokens/s over the datasheet dense peak, only when params and dtype are configured; assumptions label says which.";
    SERVING_MBU / Serving::ServingMbu = "truthscale_serving_model_bandwidth_utilization_ratio", Gauge, ["engine", "assumptions"], gauge("truthscale.serving.mbu", "1"), None,
        "Model bandwidth utilization: weight bytes * engine steps/s over peak DRAM bandwidth (weights read once per step), only when params and dtype are configured.";
    SERVING_PHASE_COMPARED_SECONDS / Serving::ServingPhaseComparedSeconds = "truthscale_serving_phase_compared_seconds_total", Counter, ["engine"], counter("truthscale.serving.phase.compared.time", "s"), None,
        "Seconds in which both the counter regime and the engine's own token rates said what the window was (prompt tokens only: prefill; output only: decode; both: mixed).";
    SERVING_PHASE_AGREED_SECONDS / Serving::ServingPhaseAgreedSeconds = "truthscale_serving_phase_agreed_seconds_total", Counter, ["engine"], counter("truthscale.serving.phase.agreed.time", "s"), None,
        "Of truthscale_serving_phase_compared_seconds_total, the seconds in which the counter phase and the engine's token rates agreed.";
    SERVING_ENGINE_MFU / Serving::ServingEngineMfu = "truthscale_serving_engine_flops_utilization_ratio", Gauge, ["engine", "assumptions"], gauge("truthscale.serving.engine_mfu", "1"), None,
        "The engine's own FLOP estimate per GPU (vLLM's or SGLang's estimated_flops_per_gpu_total, as a rate) over the GPU's datasheet peak: a model-based MFU from the engine itself.";
    SERVING_ENGINE_MBU / Serving::ServingEngineMbu = "truthscale_serving_engine_bandwidth_utilization_ratio", Gauge, ["engine", "assumptions"], gauge("truthscale.serving.engine_mbu", "1"), None,
        "The engine's own estimate of bytes read plus written per GPU per second over the GPU's DRAM bandwidth: a model-based MBU from the engine itself.";
    SERVING_COMPUTE_AGREEMENT / Serving::ServingComputeAgreement = "truthscale_serving_compute_agreement_ratio", Gauge, ["engine", "estimate", "measure"], gauge("truthscale.serving.compute_agreement", "1"), None,
        "The engine's FLOP utilization (estimate=\"engine_flops\") over the effective compute fraction truthscale measured from the counters (measure=\"effective_compute\"): 1 is agreement, above 1 the engine claims more work than the tensor and FP pipes did; not written below 1 % effective compute.";
    SERVING_BANDWIDTH_AGREEMENT / Serving::ServingBandwidthAgreement = "truthscale_serving_bandwidth_agreement_ratio", Gauge, ["engine", "estimate", "measure"], gauge("truthscale.serving.bandwidth_agreement", "1"), None,
        "The engine's bandwidth utilization (estimate=\"engine_bytes\") over the DRAM activity truthscale measured (measure=\"dram_active\"): 1 is agreement; not written below 1 % DRAM activity.";
    SIM_TRUTH_EFFECTIVE_COMPUTE_SECONDS / Gpu::SimTruthEffectiveComputeSeconds = "truthscale_sim_truth_effective_compute_seconds_total", Counter, [], counter("truthscale.sim.truth.effective_compute.time", "s"), None,
        "Simulator only: the true integral of effective compute, to check the derived one against.";
    PROCESS_MEMORY_USED / Gpu::ProcessMemoryUsed = "truthscale_process_memory_used_bytes", Gauge, ["pid", "pod_uid", "container_id"], None, None,
        "GPU memory used by one process (opt-in: source.per_process_series; high cardinality).";
    PROCESS_SM_BUSY / Gpu::ProcessSmBusy = "truthscale_process_sm_busy_ratio", Gauge, ["pid", "pod_uid", "container_id"], None, None,
        "Time fraction one process had a kernel on the SMs, as the driver reports it (opt-in; not compute).";
    GPU_SHARE / Gpu::GpuShare = "truthscale_gpu_share_ratio", Gauge, [], gauge("truthscale.gpu.share", "1"), None,
        "The share of its physical GPU this entity is, for GPU-hours: 1 for a whole GPU; a MIG instance's compute slices over the GPU's (3g.40gb on an H100: 3/7). Absent for a MIG instance of an unknown profile.";
    GPU_PODS / Gpu::GpuPods = "truthscale_gpu_pods", Gauge, [], None, None,
        "Node mode: containers the kubelet allocated this GPU or MIG instance to. 0 is idle capacity; more than 1 is a shared (time-sliced) GPU, whose series carry no pod labels. Absent where the kubelet could not be read.";
    GPU_ALLOCATION / Gpu::GpuAllocation = "truthscale_gpu_allocation_info", Gauge, ["resource", "replica", "owner_kind", "owner_name"], None, None,
        "Node mode: one series (value 1) per container the kubelet allocated this GPU or MIG instance to, labelled with that container's pod, namespace and container; replica is the time-slicing replica when the device id names one; owner_kind and owner_name the workload behind the pod where the API server's pod list names it (its controller reference, a ReplicaSet followed to its Deployment by the pod-template-hash naming rule); with node.pod_labels, one more label for each allowlisted label the holder's pod has, named label_ and the key (kube-state-metrics naming: every character outside [a-zA-Z0-9_] becomes _).";
    POD_EFFECTIVE_COMPUTE / Gpu::PodEffectiveCompute = "truthscale_pod_effective_compute_ratio", Gauge, ["method"], None, None,
        "Node mode: the effective compute fraction of a GPU or MIG instance that one container holds alone, measured by the device's own counters (method=\"sole_holder\"). Never written for a device several pods hold: their split is truthscale_pod_effective_compute_estimate_ratio.";
    POD_EFFECTIVE_COMPUTE_ESTIMATE / Gpu::PodEffectiveComputeEstimate = "truthscale_pod_effective_compute_estimate_ratio", Gauge, ["method"], gauge("truthscale.pod.effective_compute.estimate", "1"), None,
        "Node mode, shared (time-sliced) GPUs with per-process attribution: an ESTIMATE, not a measurement, of the device's effective compute fraction that is this pod's, by its processes' share of SM busy time (method=\"sm_busy_share\"); a pod label left out is processes whose pod was not found. The parts of a GPU sum to the device value; each lies between 0 and the device's measured truthscale_gpu_effective_compute_ratio, its only bounds.";
    POD_MEMORY_USED / Gpu::PodMemoryUsed = "truthscale_pod_memory_used_bytes", Gauge, [], None, None,
        "Node mode, shared GPUs with per-process attribution: GPU memory the pod's processes use, as the driver reports it per process (measured, not estimated).";
    POD_ENERGY / Gpu::PodEnergy = "truthscale_pod_energy_joules_total", Counter, ["part", "method"], None, None,
        "Node mode: the energy of a GPU or MIG instance while one container held it alone, measured (method=\"sole_holder\"), in the parts of truthscale_gpu_energy_part_joules_total; it grows only while that container holds it. A device several pods hold: truthscale_pod_energy_estimate_joules_total.";
    POD_ENERGY_ESTIMATE / Gpu::PodEnergyEstimate = "truthscale_pod_energy_estimate_joules_total", Counter, ["method"], None, None,
        "Node mode, shared (time-sliced) GPUs with per-process attribution: an ESTIMATE of the device's active energy (truthscale_gpu_energy_part_joules_total{part=\"active\"}) that is this pod's, by its processes' share of SM busy time in each window (method=\"sm_busy_share\", Kepler's rule); a pod label left out is processes whose pod was not found. The idle floor is not split. It grows only while the pod's processes run there; where no share is known the energy stays unsplit.";
    BUILD_INFO / Exporter::BuildInfo = "truthscale_build_info", Gauge, ["version"], None, None,
        "Build of the running exporter (value 1).";
    SOURCE_UP / Exporter::SourceUp = "truthscale_source_up", Gauge, ["source"], gauge("truthscale.source.up", "1"), None,
        "Whether the counter source produced a sample recently (1) or went stale (0).";
    SOURCE_ERRORS / Exporter::SourceErrors = "truthscale_source_errors_total", Counter, ["source", "kind"], counter("truthscale.source.errors", "{error}"), None,
        "Failed sampling attempts by kind: unreachable, timeout, http, too_large, parse, io, sentinel, impossible (a reading no GPU gives, such as negative free memory, or a share no cgroup gives, left blank), reset (a counter gone backwards: a cgroup's, its pod restarted, or NVML's PCIe byte counters, wrapped or reset; no rate across it), unread_family (a DCGM family truthscale does not read, once per family), ambiguous_unit (a reading whose percent or 0..1 unit could not be told, refused), overrun (a tick longer than the interval), over_limit (part of an answer over a reader's cap, left out), and for NVML no_permission, gpu_lost, unsupported, nvml; for the kubelet also unsupported (it does not serve Get); no_permission also when the API server refuses the pod list (source=\"apiserver\"); for the pods' cgroup files (source=\"pressure\") not_found (no cgroup for a pod), unreadable (missing, or not a regular file) and malformed.";
    SAMPLE_DURATION / Exporter::SampleDuration = "truthscale_sample_duration_seconds", Gauge, [], gauge("truthscale.sample.duration", "s"), None,
        "Time the last sampling and derivation tick took.";
    DIAGNOSTICS / Exporter::Diagnostics = "truthscale_derivation_diagnostics_total", Counter, ["kind"], counter("truthscale.derivation.diagnostics", "{diagnostic}"), None,
        "Readings dropped, clamped or skipped during derivation, by kind.";
    SNAPSHOT_TIMESTAMP / Exporter::SnapshotTimestamp = "truthscale_snapshot_timestamp_seconds", Gauge, [], gauge("truthscale.snapshot.timestamp", "s"), None,
        "Unix time of the snapshot being served.";
    SCRAPE_BODY / Exporter::ScrapeBody = "truthscale_scrape_body_bytes", Gauge, [], None, None,
        "Size of the previous tick's /metrics body.";
    SINK_ERRORS / Exporter::SinkErrors = "truthscale_sink_errors_total", Counter, ["sink", "kind"], counter("truthscale.sink.errors", "{error}"), None,
        "Failed pushes to a sink (sink=\"otlp\") by kind: unavailable, timeout, rejected, other; and skipped, an export left out while backing off after failures with delta temporality (its changes go with the next export the collector receives).";
    SERIES_DROPPED / Exporter::SeriesDropped = "truthscale_series_dropped_total", Counter, [], counter("truthscale.series.dropped", "{series}"), None,
        "GPU series left out of /metrics by the max_series cap, summed over snapshots (whole entities are left out: in order, each that no longer fits in what is left).";
}

/// The Prometheus label name of the Kubernetes pod label `key` on
/// `truthscale_gpu_allocation_info`, as kube-state-metrics names them: `label_` and the key
/// with every character outside `[a-zA-Z0-9_]` replaced by `_`
/// (`app.kubernetes.io/name` → `label_app_kubernetes_io_name`).
#[must_use]
pub fn pod_label_name(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 6);
    out.push_str("label_");
    out.extend(key.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// The catalog entry with this name.
#[must_use]
pub fn by_name(name: &str) -> Option<&'static MetricDesc> {
    ALL.iter().find(|m| m.name == name)
}

/// Labels every GPU-scoped series may carry, in order.
pub const GPU_LABELS: &[&str] = &[
    "gpu",
    "uuid",
    "model",
    "mig_instance",
    "mig_profile",
    "pod",
    "namespace",
    "container",
    "node",
];

/// OTLP attribute for each Prometheus label, in label order.
pub const OTEL_ATTRIBUTES: &[(&str, &str)] = &[
    ("gpu", "truthscale.gpu.index"),
    ("uuid", sa::HW_ID),
    ("model", sa::HW_MODEL),
    ("mig_instance", "truthscale.gpu.mig.instance"),
    ("mig_profile", "truthscale.gpu.mig.profile"),
    ("pod", sa::K8S_POD_NAME),
    ("namespace", sa::K8S_NAMESPACE_NAME),
    ("container", sa::K8S_CONTAINER_NAME),
    ("node", sa::K8S_NODE_NAME),
    ("source", "truthscale.source"),
    ("fidelity", "truthscale.fidelity"),
    ("catalog_model", "truthscale.catalog_model"),
    ("pci_bus_id", "truthscale.gpu.pci_bus_id"),
    ("driver_version", sa::HW_DRIVER_VERSION),
    ("phase", "truthscale.phase"),
    ("regime", "truthscale.gpu.regime"),
    ("method", "truthscale.method"),
    ("verdict", "truthscale.verdict"),
    ("cause", "truthscale.starved.cause"),
    ("owner_kind", "truthscale.k8s.owner.kind"),
    ("owner_name", "truthscale.k8s.owner.name"),
    ("job_group", "truthscale.straggler.job"),
    ("signal", "truthscale.straggler.signal"),
    ("quantity", "truthscale.ceiling.quantity"),
    ("engine", "truthscale.serving.engine"),
    ("absent_reason", "truthscale.serving.absent_reason"),
    ("assumptions", "truthscale.serving.assumptions"),
    ("estimate", "truthscale.serving.agreement.estimate"),
    ("measure", "truthscale.serving.agreement.measure"),
    ("reason", "truthscale.clock_event.reason"),
    ("state", sa::HW_STATE),
    ("scope", "truthscale.ecc.scope"),
    ("kind", sa::ERROR_TYPE),
    ("part", "truthscale.energy.part"),
    ("floor", "truthscale.energy.floor"),
    ("sink", "truthscale.sink"),
    ("version", sa::SERVICE_VERSION),
];

/// Attributes every GPU-scoped OTLP data point carries, as the hardware conventions ask.
pub const OTEL_GPU_FIXED: &[(&str, &str)] = &[(sa::HW_TYPE, "gpu"), (sa::HW_VENDOR, "NVIDIA")];

/// The OTLP attribute for a Prometheus label.
#[must_use]
pub fn otel_attribute(label: &str) -> Option<&'static str> {
    OTEL_ATTRIBUTES
        .iter()
        .find(|(l, _)| *l == label)
        .map(|(_, a)| *a)
}

/// The Prometheus ↔ OTLP mapping as a Markdown table (the body of `docs/otlp.md`).
#[must_use]
pub fn otel_markdown_table() -> String {
    let mut out = String::from(
        "| Prometheus | OTLP name | instrument | unit | attributes beyond the GPU's |\n|---|---|---|---|---|\n",
    );
    for m in ALL {
        let Some(o) = &m.otel else {
            out.push_str(&format!("| `{}` | — (Prometheus only) | | | |\n", m.name));
            continue;
        };
        let mut attrs: Vec<String> = o
            .fixed
            .iter()
            .map(|(k, v)| format!("`{k}=\"{v}\"`"))
            .collect();
        attrs.extend(
            m.extra_labels
                .iter()
                .map(|l| format!("`{}`", otel_attribute(l).unwrap_or(l))),
        );
        let attrs = if attrs.is_empty() {
            "—".to_string()
        } else {
            attrs.join(", ")
        };
        out.push_str(&format!(
            "| `{}` | `{}` | {} | `{}` | {} |\n",
            m.name,
            o.name,
            o.instrument.as_str(),
            o.unit,
            attrs
        ));
    }
    out.push_str("\n| Prometheus label | OTLP attribute |\n|---|---|\n");
    for (l, a) in OTEL_ATTRIBUTES {
        out.push_str(&format!("| `{l}` | `{a}` |\n"));
    }
    out
}

/// The catalog as a Markdown table (the body of `docs/metrics.md`).
#[must_use]
pub fn markdown_table() -> String {
    let mut out = String::from("| name | type | labels | meaning |\n|---|---|---|---|\n");
    for m in ALL {
        let mut labels: Vec<&str> = match m.scope {
            Scope::Gpu => GPU_LABELS.to_vec(),
            Scope::Exporter => Vec::new(),
        };
        labels.extend_from_slice(m.extra_labels);
        let labels = if labels.is_empty() {
            "—".to_string()
        } else {
            labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            m.name,
            m.kind.as_str(),
            labels,
            m.help.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_conventions() {
        let mut seen = std::collections::HashSet::new();
        for m in ALL {
            assert!(seen.insert(m.name), "duplicate {}", m.name);
            assert!(m.name.starts_with("truthscale_"), "{}", m.name);
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}",
                m.name
            );
            assert!(
                m.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            );
            assert!(!m.help.is_empty());
        }
        assert_eq!(by_name("truthscale_gpu_info"), Some(&GPU_INFO));
    }

    /// The exposition writes a help text as it is but for OpenMetrics' double quotes: no
    /// help holds a backslash or a line break, which both formats would escape.
    #[test]
    fn no_help_holds_a_backslash_or_a_line_break() {
        for m in ALL {
            assert!(!m.help.contains(['\\', '\n']), "{}: {:?}", m.name, m.help);
        }
    }

    /// Every OTLP name truthscale claims from the semantic conventions (any name outside its
    /// own `truthscale.` namespace) is one the `opentelemetry-semantic-conventions` crate
    /// defines, metric or attribute, and is used as its kind.
    #[test]
    fn every_name_claimed_as_semconv_is_in_the_semconv_crate() {
        use opentelemetry_semantic_conventions::{attribute, metric, resource};
        let metrics = [
            metric::HW_GPU_UTILIZATION,
            metric::HW_GPU_MEMORY_USAGE,
            metric::HW_GPU_MEMORY_LIMIT,
            metric::HW_GPU_MEMORY_UTILIZATION,
            metric::HW_POWER,
            metric::HW_ENERGY,
            metric::HW_STATUS,
            metric::HW_ERRORS,
        ];
        let attributes = [
            attribute::HW_ID,
            attribute::HW_MODEL,
            attribute::HW_TYPE,
            attribute::HW_VENDOR,
            attribute::HW_PARENT,
            attribute::HW_STATE,
            attribute::HW_GPU_TASK,
            attribute::HW_DRIVER_VERSION,
            attribute::ERROR_TYPE,
            attribute::K8S_POD_NAME,
            attribute::K8S_POD_UID,
            attribute::K8S_NAMESPACE_NAME,
            attribute::K8S_CONTAINER_NAME,
            attribute::K8S_NODE_NAME,
            resource::SERVICE_VERSION,
        ];
        let ours = |n: &str| n.starts_with("truthscale.");
        for m in ALL {
            let Some(o) = m.otel else { continue };
            assert!(
                ours(o.name) || metrics.contains(&o.name),
                "{} is not a semconv metric",
                o.name
            );
            for (k, _) in o.fixed {
                assert!(
                    ours(k) || attributes.contains(k),
                    "{k} is not a semconv attribute"
                );
            }
        }
        let mapped = OTEL_ATTRIBUTES.iter().map(|(_, a)| a);
        for a in mapped.chain(OTEL_GPU_FIXED.iter().map(|(a, _)| a)) {
            assert!(
                ours(a) || attributes.contains(a),
                "{a} is not a semconv attribute"
            );
        }
        // Each constant is the name the conventions give it.
        assert_eq!(
            metric::HW_GPU_MEMORY_UTILIZATION,
            "hw.gpu.memory.utilization"
        );
        assert_eq!(attribute::HW_PARENT, "hw.parent");
        assert_eq!(attribute::K8S_POD_UID, "k8s.pod.uid");
    }

    #[test]
    fn otel_names_units_and_attributes() {
        let mut seen = std::collections::HashSet::new();
        for m in ALL {
            let Some(o) = m.otel else { continue };
            assert!(seen.insert(o.name), "duplicate OTLP name {}", o.name);
            assert!(
                o.name.starts_with("truthscale.") || o.name.starts_with("hw."),
                "{}",
                o.name
            );
            assert!(
                o.name.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b == b'.'
                    || b == b'_'),
                "{}",
                o.name
            );
            assert!(
                [
                    "1",
                    "s",
                    "By",
                    "By/s",
                    "W",
                    "J",
                    "J/{token}",
                    "Hz",
                    "Cel",
                    "{token}/s",
                    "{tick}/s"
                ]
                .contains(&o.unit)
                    || (o.unit.starts_with('{') && o.unit.ends_with('}')),
                "{}: unit {}",
                o.name,
                o.unit
            );
            // Counters are monotonic sums, and only counters are.
            assert_eq!(
                m.kind == Kind::Counter,
                o.instrument == OtelInstrument::Counter,
                "{}",
                m.name
            );
            for l in m.extra_labels {
                assert!(otel_attribute(l).is_some(), "{}: label {l}", m.name);
            }
        }
        for l in GPU_LABELS {
            assert!(otel_attribute(l).is_some(), "label {l}");
        }
        assert_eq!(
            GPU_REPORTED_UTILIZATION.otel.unwrap().name,
            "hw.gpu.utilization"
        );
    }

    #[test]
    #[expect(
        clippy::disallowed_methods,
        reason = "a test of the docs: reads docs/otlp.md, and writes it under UPDATE_DOCS"
    )]
    fn otlp_doc_matches_catalog() {
        const BEGIN: &str = "<!-- otlp-catalog:begin -->\n";
        const END: &str = "<!-- otlp-catalog:end -->";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/otlp.md");
        let doc = std::fs::read_to_string(path).expect("docs/otlp.md exists");
        let (head, rest) = doc.split_once(BEGIN).expect("begin marker");
        let (_, tail) = rest.split_once(END).expect("end marker");
        let expected = format!("{head}{BEGIN}{}{END}{tail}", otel_markdown_table());
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(path, &expected).unwrap();
            return;
        }
        assert!(
            doc == expected,
            "docs/otlp.md is out of date with truthscale_core::catalog; run `UPDATE_DOCS=1 cargo test -p truthscale-core --lib otlp_doc`"
        );
    }

    #[test]
    fn pod_label_names_follow_kube_state_metrics() {
        assert_eq!(
            pod_label_name("app.kubernetes.io/name"),
            "label_app_kubernetes_io_name"
        );
        assert_eq!(pod_label_name("team"), "label_team");
        assert_eq!(pod_label_name("a-b_C9"), "label_a_b_C9");
        // Outside ASCII too (a key is ASCII once validated; the name is valid regardless).
        assert_eq!(pod_label_name("é"), "label__");
    }

    #[test]
    fn ids_and_names_map_both_ways() {
        for (i, m) in ALL.iter().enumerate() {
            assert_eq!(m.id.desc(), m, "{}", m.name);
            assert_eq!(MetricId::from_name(m.name), Some(m.id), "{}", m.name);
            // Exposition order is id order.
            assert_eq!(m.id.index(), i, "{}", m.name);
            if let Some(prev) = i.checked_sub(1) {
                assert!(ALL[prev].id < m.id, "{}", m.name);
            }
        }
        assert_eq!(MetricId::from_name("truthscale_nope"), None);
        // Every group's ids, and only those, are in the catalog, in its order.
        let ids: Vec<MetricId> = GpuMetric::ALL
            .iter()
            .map(|&m| m.into())
            .chain(ServingMetric::ALL.iter().map(|&m| m.into()))
            .chain(ExporterMetric::ALL.iter().map(|&m| m.into()))
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ALL.iter().map(|m| m.id).collect::<Vec<_>>());
        for m in ALL {
            let want = match m.id {
                MetricId::Gpu(_) | MetricId::Serving(_) => Scope::Gpu,
                MetricId::Exporter(_) => Scope::Exporter,
            };
            assert_eq!(m.scope, want, "{}", m.name);
        }
    }

    #[test]
    fn label_names_are_checked_against_the_descriptor() {
        let gpu = ["gpu", "uuid", "model"];
        let with = |extra: &[&'static str]| [&gpu[..], extra].concat();
        assert_eq!(GPU_UP.check_labels(&gpu), Ok(()));
        assert_eq!(GPU_UP.check_labels(&[]), Ok(()));
        assert_eq!(
            GPU_REGIME.check_labels(&with(&["regime", "method"])),
            Ok(())
        );
        // Out of order, missing, extra, repeated.
        assert!(
            GPU_REGIME
                .check_labels(&with(&["method", "regime"]))
                .is_err()
        );
        assert!(GPU_REGIME.check_labels(&with(&["regime"])).is_err());
        assert!(GPU_UP.check_labels(&with(&["regime"])).is_err());
        assert!(GPU_UP.check_labels(&["uuid", "gpu"]).is_err());
        assert!(
            POD_MEMORY_USED
                .check_labels(&["gpu", "pod", "namespace", "pod"])
                .is_err()
        );
        // The pod of a shared device's part, after the entity's own labels (its node too).
        assert_eq!(
            POD_EFFECTIVE_COMPUTE.check_labels(&["gpu", "uuid", "pod", "namespace", "method"]),
            Ok(())
        );
        assert_eq!(
            POD_MEMORY_USED.check_labels(&["gpu", "node", "pod", "namespace", "container"]),
            Ok(())
        );
        assert_eq!(
            POD_CPU_THROTTLED.check_labels(&with(&["pod", "namespace"])),
            Ok(())
        );
        assert_eq!(POD_IO_STALLED.check_labels(&gpu), Ok(()));
        // Only those families add a pod after the node; none adds one the entity has.
        assert!(GPU_UP.check_labels(&["gpu", "node", "pod"]).is_err());
        assert!(
            POD_MEMORY_USED
                .check_labels(&["gpu", "pod", "node", "pod"])
                .is_err()
        );
        assert!(
            POD_MEMORY_USED
                .check_labels(&["gpu", "node", "namespace", "pod"])
                .is_err()
        );
        // Allocation: replica only where named, pod labels after it.
        for names in [
            with(&["pod", "resource"]),
            with(&["pod", "namespace", "resource", "replica", "label_team"]),
            with(&["resource", "label_a", "label_b"]),
        ] {
            assert_eq!(GPU_ALLOCATION.check_labels(&names), Ok(()), "{names:?}");
        }
        assert!(GPU_ALLOCATION.check_labels(&with(&["replica"])).is_err());
        assert!(
            GPU_ALLOCATION
                .check_labels(&with(&["resource", "team"]))
                .is_err()
        );
        // The exporter's families have no GPU labels.
        assert_eq!(SINK_ERRORS.check_labels(&["sink", "kind"]), Ok(()));
        assert!(SAMPLE_DURATION.check_labels(&["gpu"]).is_err());
    }

    #[test]
    fn raw_families_are_gauges_of_one_reading() {
        let mut fields = std::collections::HashSet::new();
        for m in ALL {
            let Some(r) = m.raw else { continue };
            assert_eq!(m.kind, Kind::Gauge, "{}", m.name);
            assert!(m.extra_labels.is_empty(), "{}", m.name);
            assert!(matches!(m.id, MetricId::Gpu(_)), "{}", m.name);
            assert!(fields.insert(r.field), "{}: {:?} twice", m.name, r.field);
            assert!(r.scale.is_finite() && r.scale > 0.0, "{}", m.name);
            // A ratio field is exported as a ratio.
            assert_eq!(r.field.is_ratio(), m.name.ends_with("_ratio"), "{}", m.name);
            // Reading back undoes the export (to the last bit, at worst).
            for v in [0.0, 0.37, 1.0, 1830.0, 1464.0, 80e9] {
                let back = r.read_back(r.export(v));
                assert!(
                    (back - v).abs() <= v * f64::EPSILON,
                    "{} {v}: {back}",
                    m.name
                );
            }
        }
        // The SM clock: MHz read, Hz exported; read back as the history did (× 1e-6).
        let clock = GPU_SM_CLOCK.raw.unwrap();
        assert_eq!((clock.field, clock.scale), (Field::SmClockMhz, 1e6));
        assert_eq!(clock.scale.recip().to_bits(), 1e-6f64.to_bits());
        assert_eq!(GPU_POWER.raw.unwrap().kind, RawKind::Estimate);
    }
}
