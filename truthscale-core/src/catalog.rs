//! The metric catalog: every exported metric name, its type, help and extra labels.
//!
//! This is the single source of truth for names: the exposition encoder only accepts a
//! [`MetricDesc`] from here, and `docs/metrics.md` is checked against it by a test.

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

macro_rules! metrics {
    ($( $id:ident / $variant:ident = $name:literal, $kind:ident, $scope:ident, [$($l:literal),*], $otel:expr, $help:literal; )+) => {
        $(
            #[doc = $help]
            pub const $id: MetricDesc = MetricDesc {
                id: MetricId::$variant,
                name: $name,
                kind: Kind::$kind,
                help: $help,
                scope: Scope::$scope,
                extra_labels: &[$($l),*],
                otel: $otel,
            };
        )+
        /// Every metric, in exposition order.
        pub const ALL: &[MetricDesc] = &[$($id),+];

        /// One id per catalog entry. The encoder matches on it exhaustively, so a metric
        /// without a value, or a value without a metric, does not compile.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum MetricId {
            $(
                #[doc = $name]
                $variant
            ),+
        }

        impl MetricId {
            /// The catalog entry of this id.
            #[must_use]
            pub fn desc(self) -> &'static MetricDesc {
                match self { $(MetricId::$variant => &$id),+ }
            }

            /// The id of a full metric name (`truthscale_…`, counters with `_total`): the
            /// reverse map for readers of truthscale's own series.
            #[must_use]
            pub fn from_name(name: &str) -> Option<MetricId> {
                match name { $($name => Some(MetricId::$variant),)+ _ => None }
            }
        }
    };
}

metrics! {
    GPU_INFO / GpuInfo = "truthscale_gpu_info", Gauge, Gpu, ["source", "fidelity", "catalog_model"], gauge("truthscale.gpu.info", "1"),
        "Identity of a GPU or MIG instance (value 1); source=\"sim\" marks simulated data, replayed or live; fidelity is the capability tier, the best any window had (stable; per-window coverage is in the *_observed_seconds_total counters).";
    GPU_UP / GpuUp = "truthscale_gpu_up", Gauge, Gpu, [], gauge("truthscale.gpu.up", "1"),
        "Whether the GPU produced data within the stale period (1), or stopped, e.g. fell off the bus (0, kept for 10 minutes; its other series are gone).";
    GPU_REPORTED_UTILIZATION / GpuReportedUtilization = "truthscale_gpu_reported_utilization_ratio", Gauge, Gpu, [], Some(OtelDesc { name: "hw.gpu.utilization", unit: "1", instrument: OtelInstrument::Gauge, fixed: &[("hw.gpu.task", "general")] }),
        "Busy fraction as nvidia-smi reports it: time with at least one kernel resident.";
    GPU_EFFECTIVE_COMPUTE / GpuEffectiveCompute = "truthscale_gpu_effective_compute_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.effective_compute", "1"),
        "Effective compute fraction of the last window: tensor work (plus peak-weighted FP16/FP32 pipes) over the datasheet dense peak, times the clock correction; only for a window with an SM-clock reading and a catalog model (truthscale_gpu_clock_correction_ratio present): without them the tensor activity is not corrected, so there is no value (the raw pipe is truthscale_gpu_tensor_active_ratio).";
    GPU_EFFECTIVE_COMPUTE_UPPER_BOUND / GpuEffectiveComputeUpperBound = "truthscale_gpu_effective_compute_upper_bound_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.effective_compute.upper_bound", "1"),
        "Upper bound on effective compute when no tensor counter exists (equals the busy fraction).";
    GPU_ROOFLINE_SATURATION / GpuRooflineSaturation = "truthscale_gpu_roofline_saturation_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.roofline_saturation", "1"),
        "Roofline saturation at the clocks the GPU ran: max(compute, DRAM activity).";
    GPU_INFLATION_GAP / GpuInflationGap = "truthscale_gpu_inflation_gap_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.inflation_gap", "1"),
        "Reported utilization minus effective compute (multiply by 100 for points).";
    GPU_SPATIAL_INFLATION / GpuSpatialInflation = "truthscale_gpu_spatial_inflation_factor", Gauge, Gpu, [], gauge("truthscale.gpu.spatial_inflation", "1"),
        "Reported utilization over SM active: how much the busy flag overstates SM coverage.";
    GPU_INTENSITY_RIDGE / GpuIntensityRidge = "truthscale_gpu_intensity_ridge_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.intensity_ridge", "1"),
        "Operational intensity over the roofline ridge (rho = tensor / DRAM activity); above 1 is compute-bound.";
    GPU_POWER_PROXY / GpuPowerProxy = "truthscale_gpu_power_proxy_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.power_proxy", "1"),
        "Power above idle over the power range: an estimate of work intensity, not compute (below the profiling tier).";
    GPU_CLOCK_CORRECTION / GpuClockCorrection = "truthscale_gpu_clock_correction_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.clock_correction", "1"),
        "Mean SM clock of the last window over the clock the datasheet peak assumes (kappa).";
    GPU_SM_ACTIVE / GpuSmActive = "truthscale_gpu_sm_active_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.sm.active", "1"),
        "Raw SM active fraction, where the source provides it.";
    GPU_SM_OCCUPANCY / GpuSmOccupancy = "truthscale_gpu_sm_occupancy_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.sm.occupancy", "1"),
        "Raw SM occupancy, where the source provides it.";
    GPU_TENSOR_ACTIVE / GpuTensorActive = "truthscale_gpu_tensor_active_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.tensor.active", "1"),
        "Raw tensor pipe active fraction, where the source provides it.";
    GPU_HMMA_ACTIVE / GpuHmmaActive = "truthscale_gpu_hmma_active_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.tensor.hmma.active", "1"),
        "Raw HMMA (half-precision) tensor pipe active fraction, where the source provides it.";
    GPU_IMMA_ACTIVE / GpuImmaActive = "truthscale_gpu_imma_active_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.tensor.imma.active", "1"),
        "Raw IMMA (integer) tensor pipe active fraction, where the source provides it.";
    GPU_DRAM_ACTIVE / GpuDramActive = "truthscale_gpu_dram_active_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.dram.active", "1"),
        "Raw DRAM bandwidth fraction, where the source provides it.";
    GPU_OBSERVED_SECONDS / GpuObservedSeconds = "truthscale_gpu_observed_seconds_total", Counter, Gpu, [], counter("truthscale.gpu.observed.time", "s"),
        "Seconds covered by derived windows (the denominator for exact averages).";
    GPU_UNOBSERVED_SECONDS / GpuUnobservedSeconds = "truthscale_gpu_unobserved_seconds_total", Counter, Gpu, [], counter("truthscale.gpu.unobserved.time", "s"),
        "Seconds not observed: windows longer than derive.max_gap_intervals of the source's update interval (a source that was down, a capture with a hole). No other counter grows for them, but energy where the energy counter spans them.";
    GPU_BUSY_SECONDS / GpuBusySeconds = "truthscale_gpu_busy_seconds_total", Counter, Gpu, [], counter("truthscale.gpu.busy.time", "s"),
        "Integral of reported utilization over the seconds it was measured; only for entities with a busy flag. Mean: divide by truthscale_gpu_busy_observed_seconds_total.";
    GPU_BUSY_OBSERVED_SECONDS / GpuBusyObservedSeconds = "truthscale_gpu_busy_observed_seconds_total", Counter, Gpu, [], counter("truthscale.gpu.busy.observed.time", "s"),
        "Seconds in which the busy flag was measured: the denominator of truthscale_gpu_busy_seconds_total.";
    GPU_EFFECTIVE_COMPUTE_SECONDS / GpuEffectiveComputeSeconds = "truthscale_gpu_effective_compute_seconds_total", Counter, Gpu, [], counter("truthscale.gpu.effective_compute.time", "s"),
        "Integral of the effective compute fraction over the seconds it was measured; only for entities with a tensor counter. Mean: divide by truthscale_gpu_effective_compute_observed_seconds_total.";
    GPU_EFFECTIVE_COMPUTE_OBSERVED_SECONDS / GpuEffectiveComputeObservedSeconds = "truthscale_gpu_effective_compute_observed_seconds_total", Counter, Gpu, [], counter("truthscale.gpu.effective_compute.observed.time", "s"),
        "Seconds in which effective compute was measured (DCGM multiplexing blanks some windows): the denominator of truthscale_gpu_effective_compute_seconds_total.";
    GPU_REGIME_SECONDS / GpuRegimeSeconds = "truthscale_gpu_regime_seconds_total", Counter, Gpu, ["regime", "method"], counter("truthscale.gpu.regime.time", "s"),
        "Seconds in each counter regime (idle, compute_bound, memory_bound, mixed, stalled, underloaded), for every workload; method=counters from tensor and DRAM counters, method=power_heuristic an estimate from the busy flag and power.";
    GPU_REGIME / GpuRegime = "truthscale_gpu_regime", Gauge, Gpu, ["regime", "method"], gauge("truthscale.gpu.regime", "1"),
        "The counter regime of the last window (1) and the others (0); method says how it was decided.";
    GPU_PHASE_SECONDS / GpuPhaseSeconds = "truthscale_gpu_phase_seconds_total", Counter, Gpu, ["phase", "method"], counter("truthscale.gpu.phase.time", "s"),
        "LLM serving only (an engine attached, or derive.workload = llm_serving): seconds in each phase; prefill is the compute-bound regime, decode the memory-bound one.";
    GPU_PHASE / GpuPhase = "truthscale_gpu_phase", Gauge, Gpu, ["phase", "method"], gauge("truthscale.gpu.phase", "1"),
        "LLM serving only: the current phase (1) and the others (0), in serving words (prefill, decode).";
    GPU_MEMORY_USED / GpuMemoryUsed = "truthscale_gpu_memory_used_bytes", Gauge, Gpu, [], updown("hw.gpu.memory.usage", "By"),
        "Allocated device memory.";
    GPU_MEMORY_TOTAL / GpuMemoryTotal = "truthscale_gpu_memory_total_bytes", Gauge, Gpu, [], updown("hw.gpu.memory.limit", "By"),
        "Total device memory.";
    GPU_POWER / GpuPower = "truthscale_gpu_power_watts", Gauge, Gpu, [], gauge("hw.power", "W"),
        "Power over the last window (from the energy counter when available).";
    GPU_POWER_LIMIT / GpuPowerLimit = "truthscale_gpu_power_limit_watts", Gauge, Gpu, [], gauge("truthscale.gpu.power.limit", "W"),
        "Enforced power limit.";
    GPU_ENERGY / GpuEnergy = "truthscale_gpu_energy_joules_total", Counter, Gpu, [], counter("hw.energy", "J"),
        "Energy measured since the exporter first saw the GPU (energy counter deltas, else power times time); only for entities with an energy or power reading.";
    GPU_ENERGY_OBSERVED_SECONDS / GpuEnergyObservedSeconds = "truthscale_gpu_energy_observed_seconds_total", Counter, Gpu, [], counter("truthscale.gpu.energy.observed.time", "s"),
        "Seconds in which energy was measured: the denominator for mean power from truthscale_gpu_energy_joules_total.";
    GPU_SM_CLOCK / GpuSmClock = "truthscale_gpu_sm_clock_hertz", Gauge, Gpu, [], gauge("truthscale.gpu.sm.clock", "Hz"),
        "SM clock.";
    GPU_TEMPERATURE / GpuTemperature = "truthscale_gpu_temperature_celsius", Gauge, Gpu, [], gauge("truthscale.gpu.temperature", "Cel"),
        "GPU temperature.";
    GPU_CLOCK_EVENT / GpuClockEvent = "truthscale_gpu_clock_event_active", Gauge, Gpu, ["reason"], gauge("truthscale.gpu.clock_event.active", "1"),
        "Clock-event (throttle) reasons active in the last window (1) or not (0).";
    GPU_VERDICT / GpuVerdict = "truthscale_gpu_verdict", Gauge, Gpu, ["verdict"], gauge("truthscale.gpu.verdict", "1"),
        "The verdict of the last window (1) and the others (0): throttled, blocked, starved, busy, idle, unknown (see docs/verdicts.md).";
    GPU_CEILING_ROOFLINE_SATURATION / GpuCeilingRooflineSaturation = "truthscale_gpu_ceiling_roofline_saturation_ratio", Gauge, Gpu, [], gauge("truthscale.gpu.ceiling.roofline_saturation", "1"),
        "Observed ceiling: the best 60 s average roofline saturation seen in the last hour. Observed, so a lower bound on the true ceiling.";
    GPU_CEILING_OUTPUT_TOKENS / GpuCeilingOutputTokens = "truthscale_gpu_ceiling_output_tokens_per_second", Gauge, Gpu, [], gauge("truthscale.gpu.ceiling.output_tokens.rate", "{token}/s"),
        "Observed ceiling: the best 60 s average of the serving engine's output tokens per second in the last hour. Observed, so a lower bound on the true ceiling.";
    GPU_CEILING_AGE / GpuCeilingAge = "truthscale_gpu_ceiling_age_seconds", Gauge, Gpu, ["quantity"], gauge("truthscale.gpu.ceiling.age", "s"),
        "Seconds since the 60 s span that set the observed ceiling ended; quantity=roofline_saturation|output_tokens_per_second.";
    GPU_CEILING_RATIO / GpuCeilingRatio = "truthscale_gpu_ceiling_ratio", Gauge, Gpu, ["quantity"], gauge("truthscale.gpu.ceiling.ratio", "1"),
        "Current window over the observed ceiling (quantity=roofline_saturation|output_tokens_per_second). The ceiling is observed, a lower bound on the true one, so this overstates how close to the limit the GPU runs; one window can exceed 1.";
    SERVING_ENGINE_UP / ServingEngineUp = "truthscale_serving_engine_up", Gauge, Gpu, ["engine", "absent_reason"], gauge("truthscale.serving.engine.up", "1"),
        "Whether the serving engine's /metrics was read with the GPU sample (1, engine=vllm|sglang|tgi) or is absent (0, with absent_reason); absent is never zeros.";
    SERVING_KV_CACHE_USAGE / ServingKvCacheUsage = "truthscale_serving_kv_cache_usage_ratio", Gauge, Gpu, ["engine"], gauge("truthscale.serving.kv_cache.usage", "1"),
        "KV-cache pressure: fraction of the engine's KV-cache blocks in use.";
    SERVING_REQUESTS_RUNNING / ServingRequestsRunning = "truthscale_serving_requests_running", Gauge, Gpu, ["engine"], gauge("truthscale.serving.requests.running", "{request}"),
        "Requests the engine is running.";
    SERVING_REQUESTS_WAITING / ServingRequestsWaiting = "truthscale_serving_requests_waiting", Gauge, Gpu, ["engine"], gauge("truthscale.serving.requests.waiting", "{request}"),
        "Requests queued in the engine.";
    SERVING_QUEUE_SECONDS / ServingQueueSeconds = "truthscale_serving_queue_seconds", Gauge, Gpu, ["engine"], gauge("truthscale.serving.queue.duration", "s"),
        "Mean time requests that left the queue in the last window had waited.";
    SERVING_PROMPT_TOKENS / ServingPromptTokens = "truthscale_serving_prompt_tokens_per_second", Gauge, Gpu, ["engine"], gauge("truthscale.serving.prompt_tokens.rate", "{token}/s"),
        "Prompt (prefill) tokens per second: the rate of the engine's counter over the last window, resets handled.";
    SERVING_OUTPUT_TOKENS / ServingOutputTokens = "truthscale_serving_output_tokens_per_second", Gauge, Gpu, ["engine"], gauge("truthscale.serving.output_tokens.rate", "{token}/s"),
        "Output (generated) tokens per second: the rate of the engine's counter over the last window, resets handled.";
    SERVING_BATCH_SIZE / ServingBatchSize = "truthscale_serving_batch_size", Gauge, Gpu, ["engine"], gauge("truthscale.serving.batch.size", "{request}"),
        "Requests in the running batch.";
    SERVING_TOKENS_PER_EFFECTIVE_COMPUTE / ServingTokensPerEffectiveCompute = "truthscale_serving_tokens_per_effective_compute_second", Gauge, Gpu, ["engine"], gauge("truthscale.serving.tokens_per_effective_compute", "{token}/s"),
        "Prompt plus output tokens per second over the effective compute fraction: tokens per second of full-peak compute.";
    SERVING_MFU / ServingMfu = "truthscale_serving_model_flops_utilization_ratio", Gauge, Gpu, ["engine", "assumptions"], gauge("truthscale.serving.mfu", "1"),
        "Model FLOP utilization 2*params*tokens/s over the datasheet dense peak, only when params and dtype are configured; assumptions label says which.";
    SERVING_MBU / ServingMbu = "truthscale_serving_model_bandwidth_utilization_ratio", Gauge, Gpu, ["engine", "assumptions"], gauge("truthscale.serving.mbu", "1"),
        "Model bandwidth utilization: weight bytes * engine steps/s over peak DRAM bandwidth (weights read once per step), only when params and dtype are configured.";
    SERVING_PHASE_COMPARED_SECONDS / ServingPhaseComparedSeconds = "truthscale_serving_phase_compared_seconds_total", Counter, Gpu, ["engine"], counter("truthscale.serving.phase.compared.time", "s"),
        "Seconds in which both the counter regime and the engine's own token rates said what the window was (prompt tokens only: prefill; output only: decode; both: mixed).";
    SERVING_PHASE_AGREED_SECONDS / ServingPhaseAgreedSeconds = "truthscale_serving_phase_agreed_seconds_total", Counter, Gpu, ["engine"], counter("truthscale.serving.phase.agreed.time", "s"),
        "Of truthscale_serving_phase_compared_seconds_total, the seconds in which the counter phase and the engine's token rates agreed.";
    SERVING_ENGINE_MFU / ServingEngineMfu = "truthscale_serving_engine_flops_utilization_ratio", Gauge, Gpu, ["engine", "assumptions"], gauge("truthscale.serving.engine_mfu", "1"),
        "The engine's own FLOP estimate per GPU (vLLM's or SGLang's estimated_flops_per_gpu_total, as a rate) over the GPU's datasheet peak: a model-based MFU from the engine itself.";
    SERVING_ENGINE_MBU / ServingEngineMbu = "truthscale_serving_engine_bandwidth_utilization_ratio", Gauge, Gpu, ["engine", "assumptions"], gauge("truthscale.serving.engine_mbu", "1"),
        "The engine's own estimate of bytes read plus written per GPU per second over the GPU's DRAM bandwidth: a model-based MBU from the engine itself.";
    SERVING_COMPUTE_AGREEMENT / ServingComputeAgreement = "truthscale_serving_compute_agreement_ratio", Gauge, Gpu, ["engine", "estimate", "measure"], gauge("truthscale.serving.compute_agreement", "1"),
        "The engine's FLOP utilization (estimate=\"engine_flops\") over the effective compute fraction truthscale measured from the counters (measure=\"effective_compute\"): 1 is agreement, above 1 the engine claims more work than the tensor and FP pipes did; not written below 1 % effective compute.";
    SERVING_BANDWIDTH_AGREEMENT / ServingBandwidthAgreement = "truthscale_serving_bandwidth_agreement_ratio", Gauge, Gpu, ["engine", "estimate", "measure"], gauge("truthscale.serving.bandwidth_agreement", "1"),
        "The engine's bandwidth utilization (estimate=\"engine_bytes\") over the DRAM activity truthscale measured (measure=\"dram_active\"): 1 is agreement; not written below 1 % DRAM activity.";
    SIM_TRUTH_EFFECTIVE_COMPUTE_SECONDS / SimTruthEffectiveComputeSeconds = "truthscale_sim_truth_effective_compute_seconds_total", Counter, Gpu, [], counter("truthscale.sim.truth.effective_compute.time", "s"),
        "Simulator only: the true integral of effective compute, to check the derived one against.";
    PROCESS_MEMORY_USED / ProcessMemoryUsed = "truthscale_process_memory_used_bytes", Gauge, Gpu, ["pid", "pod_uid", "container_id"], None,
        "GPU memory used by one process (opt-in: source.per_process_series; high cardinality).";
    PROCESS_SM_BUSY / ProcessSmBusy = "truthscale_process_sm_busy_ratio", Gauge, Gpu, ["pid", "pod_uid", "container_id"], None,
        "Time fraction one process had a kernel on the SMs, as the driver reports it (opt-in; not compute).";
    GPU_PODS / GpuPods = "truthscale_gpu_pods", Gauge, Gpu, [], None,
        "Node mode: containers the kubelet allocated this GPU or MIG instance to. 0 is idle capacity; more than 1 is a shared (time-sliced) GPU, whose series carry no pod labels. Absent where the kubelet could not be read.";
    GPU_ALLOCATION / GpuAllocation = "truthscale_gpu_allocation_info", Gauge, Gpu, ["resource", "replica"], None,
        "Node mode: one series (value 1) per container the kubelet allocated this GPU or MIG instance to, labelled with that container's pod, namespace and container; replica is the time-slicing replica when the device id names one; with node.pod_labels, one more label for each allowlisted label the holder's pod has, named label_ and the key (kube-state-metrics naming: every character outside [a-zA-Z0-9_] becomes _).";
    POD_EFFECTIVE_COMPUTE / PodEffectiveCompute = "truthscale_pod_effective_compute_ratio", Gauge, Gpu, ["method"], None,
        "Node mode, shared GPUs with per-process attribution: an estimate of the device's effective compute fraction that is this pod's, by its processes' share of SM busy time (method=\"sm_busy_share\"); a pod label left out is processes whose pod was not found. The pods of a GPU sum to the device value.";
    POD_MEMORY_USED / PodMemoryUsed = "truthscale_pod_memory_used_bytes", Gauge, Gpu, [], None,
        "Node mode, shared GPUs with per-process attribution: GPU memory the pod's processes use, as the driver reports it per process (measured, not estimated).";
    BUILD_INFO / BuildInfo = "truthscale_build_info", Gauge, Exporter, ["version"], None,
        "Build of the running exporter (value 1).";
    SOURCE_UP / SourceUp = "truthscale_source_up", Gauge, Exporter, ["source"], gauge("truthscale.source.up", "1"),
        "Whether the counter source produced a sample recently (1) or went stale (0).";
    SOURCE_ERRORS / SourceErrors = "truthscale_source_errors_total", Counter, Exporter, ["source", "kind"], counter("truthscale.source.errors", "{error}"),
        "Failed sampling attempts by kind: unreachable, timeout, http, too_large, parse, io, sentinel, overrun (a tick longer than the interval), and for NVML no_permission, gpu_lost, unsupported, nvml; for the kubelet also unsupported (it does not serve Get); no_permission also when the API server refuses the pod list (source=\"apiserver\").";
    SAMPLE_DURATION / SampleDuration = "truthscale_sample_duration_seconds", Gauge, Exporter, [], gauge("truthscale.sample.duration", "s"),
        "Time the last sampling and derivation tick took.";
    DIAGNOSTICS / Diagnostics = "truthscale_derivation_diagnostics_total", Counter, Exporter, ["kind"], counter("truthscale.derivation.diagnostics", "{diagnostic}"),
        "Readings dropped, clamped or skipped during derivation, by kind.";
    SNAPSHOT_TIMESTAMP / SnapshotTimestamp = "truthscale_snapshot_timestamp_seconds", Gauge, Exporter, [], gauge("truthscale.snapshot.timestamp", "s"),
        "Unix time of the snapshot being served.";
    SCRAPE_BODY / ScrapeBody = "truthscale_scrape_body_bytes", Gauge, Exporter, [], None,
        "Size of the previous tick's /metrics body.";
    SINK_ERRORS / SinkErrors = "truthscale_sink_errors_total", Counter, Exporter, ["sink", "kind"], counter("truthscale.sink.errors", "{error}"),
        "Failed pushes to a sink (sink=\"otlp\") by kind: unavailable, timeout, rejected, other.";
    SERIES_DROPPED / SeriesDropped = "truthscale_series_dropped_total", Counter, Exporter, [], counter("truthscale.series.dropped", "{series}"),
        "GPU series left out of /metrics by the max_series cap, summed over snapshots (whole entities are left out, the last first).";
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
    ("uuid", "hw.id"),
    ("model", "hw.model"),
    ("mig_instance", "truthscale.gpu.mig.instance"),
    ("mig_profile", "truthscale.gpu.mig.profile"),
    ("pod", "k8s.pod.name"),
    ("namespace", "k8s.namespace.name"),
    ("container", "k8s.container.name"),
    ("node", "k8s.node.name"),
    ("source", "truthscale.source"),
    ("fidelity", "truthscale.fidelity"),
    ("catalog_model", "truthscale.catalog_model"),
    ("phase", "truthscale.phase"),
    ("regime", "truthscale.gpu.regime"),
    ("method", "truthscale.method"),
    ("verdict", "truthscale.verdict"),
    ("quantity", "truthscale.ceiling.quantity"),
    ("engine", "truthscale.serving.engine"),
    ("absent_reason", "truthscale.serving.absent_reason"),
    ("assumptions", "truthscale.serving.assumptions"),
    ("estimate", "truthscale.serving.agreement.estimate"),
    ("measure", "truthscale.serving.agreement.measure"),
    ("reason", "truthscale.clock_event.reason"),
    ("kind", "error.type"),
    ("sink", "truthscale.sink"),
    ("version", "service.version"),
];

/// Attributes every GPU-scoped OTLP data point carries, as the hardware conventions ask.
pub const OTEL_GPU_FIXED: &[(&str, &str)] = &[("hw.type", "gpu"), ("hw.vendor", "NVIDIA")];

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
                ["1", "s", "By", "W", "J", "Hz", "Cel", "{token}/s"].contains(&o.unit)
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
            assert_eq!(m.id as usize, i, "{}", m.name);
        }
        assert_eq!(MetricId::from_name("truthscale_nope"), None);
    }
}
